package cutover

import (
	"maps"
	"slices"
	"testing"
	"time"
)

// TestInTransition: a cutover is midway from its fence step until "done"
// (the journal is written before each step acts), an abort for a minute
// after it (its unfence follows), and one that moved on between two reads
// changed fences between them.
func TestInTransition(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	at := func(id int64, s Step, ago time.Duration) Last { return Last{ID: id, Step: s, At: now.Add(-ago)} }
	for _, tc := range []struct {
		l    Last
		want bool
	}{
		{at(1, StepGates, 0), false},
		{at(1, StepFenceSource, time.Hour), true},
		{at(1, StepDrain, 0), true},
		{at(1, StepPublish, 0), true},
		{at(1, StepUnfenceTarget, 0), true},
		{at(1, StepDone, 0), false},
		{at(1, StepAbort, 10*time.Second), true},
		{at(1, StepAbort, 2*time.Minute), false},
	} {
		if got := Midway(tc.l, now); got != tc.want {
			t.Errorf("Midway(%s, %s ago) = %v", tc.l.Step, now.Sub(tc.l.At), got)
		}
	}
	before := map[string]Last{
		"done":     at(1, StepDone, time.Hour),
		"midway":   at(2, StepDrain, 0),
		"finished": at(3, StepFenceSource, 0), // done by the second read
		"began":    at(4, StepDone, time.Hour),
	}
	after := map[string]Last{
		"done":     at(1, StepDone, time.Hour),
		"midway":   at(2, StepDrain, 0),
		"finished": at(9, StepDone, 0),
		"began":    at(10, StepGates, 0), // a new attempt past its gates, not fencing yet, but it moved
		"new":      at(11, StepDone, 0),  // began and ended between the reads
	}
	got := slices.Sorted(maps.Keys(InTransition(before, after, now)))
	if want := []string{"began", "finished", "midway", "new"}; !slices.Equal(got, want) {
		t.Errorf("in transition %v, want %v", got, want)
	}
	if n := len(InTransition(map[string]Last{"done": before["done"]}, map[string]Last{"done": before["done"]}, now)); n != 0 {
		t.Errorf("a cutover done before and after: %d in transition", n)
	}
}
