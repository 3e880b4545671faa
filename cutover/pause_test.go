package cutover

import (
	"testing"
	"time"
)

func TestPauses(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name string
		h    []Entry
		now  int
		want PauseSummary
	}{
		{"none", nil, 0, PauseSummary{}},
		{"gates only (aborted before any fence)", []Entry{{Step: StepAbort, At: at(5)}}, 10, PauseSummary{}},
		{"one clean cutover", []Entry{
			{Step: StepFenceSource, At: at(0)}, {Step: StepPublish, At: at(20)}, {Step: StepUnfenceTarget, At: at(25)}, {Step: StepDone, At: at(30)},
		}, 100, PauseSummary{Total: 30 * time.Millisecond, Longest: 30 * time.Millisecond, Fenced: 1}},
		{"aborted twice then done", []Entry{
			{Step: StepFenceSource, At: at(0)}, {Step: StepAbort, At: at(2000)},
			{Step: StepFenceSource, At: at(10000)}, {Step: StepAbort, At: at(257000)}, // the source crashed inside the pause
			{Step: StepFenceSource, At: at(300000)}, {Step: StepDone, At: at(300040)},
		}, 400000, PauseSummary{Total: 249040 * time.Millisecond, Longest: 247 * time.Second, Fenced: 3}},
		{"open now", []Entry{{Step: StepFenceSource, At: at(0)}, {Step: StepMarker, At: at(5)}}, 700,
			PauseSummary{Total: 700 * time.Millisecond, Longest: 700 * time.Millisecond, Fenced: 1, Open: true}},
		{"fence record after an unsettled one", []Entry{
			{Step: StepFenceSource, At: at(0)}, {Step: StepFenceSource, At: at(50)}, {Step: StepDone, At: at(60)},
		}, 100, PauseSummary{Total: 60 * time.Millisecond, Longest: 50 * time.Millisecond, Fenced: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Pauses(tc.h, at(tc.now)); got != tc.want {
				t.Errorf("Pauses = %+v, want %+v", got, tc.want)
			}
		})
	}
}
