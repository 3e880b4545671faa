package backfill

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestRateWindowETA(t *testing.T) {
	for _, tc := range []struct {
		name                string
		samples             []Sample
		rowsLeft, bytesLeft int64
		want                time.Duration
		ok                  bool
	}{
		{"no samples", nil, 100, 0, 0, false},
		{"one sample", []Sample{{at(0), 0, 0}}, 100, 0, 0, false},
		{"same instant", []Sample{{at(1), 0, 0}, {at(1), 10, 10}}, 100, 0, 0, false},
		{"steady rows", []Sample{{at(0), 0, 0}, {at(10), 1000, 0}}, 500, 0, 5 * time.Second, true},
		{"bytes bind", []Sample{{at(0), 0, 0}, {at(10), 1000, 1000}}, 500, 2000, 20 * time.Second, true},
		{"nothing left", []Sample{{at(0), 0, 0}, {at(10), 1000, 1000}}, 0, 0, 0, true},
		{"paused: no estimate", []Sample{{at(0), 500, 500}, {at(10), 500, 500}}, 100, 100, 0, false},
		// only the last 60 s count: 100 rows/s then 10 rows/s
		{"window drops the old rate", []Sample{{at(0), 0, 0}, {at(100), 10000, 0}, {at(140), 10400, 0}, {at(200), 11000, 0}}, 1000, 0, 100 * time.Second, true},
		{"older sample ignored", []Sample{{at(0), 0, 0}, {at(10), 100, 0}, {at(5), 0, 0}}, 100, 0, 10 * time.Second, true},
		{"progress restarts", []Sample{{at(0), 0, 0}, {at(10), 1000, 0}, {at(20), 10, 0}, {at(30), 110, 0}}, 100, 0, 10 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := RateWindow{Span: time.Minute}
			for _, s := range tc.samples {
				w.Add(s)
			}
			got, ok := w.ETA(tc.rowsLeft, tc.bytesLeft)
			if ok != tc.ok || (ok && got.Round(time.Millisecond) != tc.want) {
				t.Errorf("ETA = %s, %v; want %s, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// A throttled copy of 1M rows that starts slowly (warm-up, a throttle
// raised after a minute) and then runs at the rate it keeps: once 10% is
// done, the window's ETA is within 20% of the real remaining time, where the
// average since the start is not.
func TestRateWindowETAOnThrottledCopy(t *testing.T) {
	const total = 1_000_000
	rate := func(s float64) float64 { // rows/s at second s
		if s < 60 {
			return 500
		}
		return 2000
	}
	// Simulate, sampling every 5 s.
	var samples []Sample
	rows := 0.0
	for s := 0.0; rows < total; s += 5 {
		samples = append(samples, Sample{At: at(s), Rows: int64(rows), Bytes: int64(rows * 200)})
		rows += 5 * rate(s)
	}
	end := samples[len(samples)-1].At.Add(5 * time.Second)
	var w RateWindow // DefaultRateWindow
	checked := 0
	worstSinceStart := 0.0
	for _, s := range samples {
		w.Add(s)
		if s.Rows < total/10 {
			continue
		}
		left := int64(total) - s.Rows
		eta, ok := w.ETA(left, left*200)
		if !ok {
			t.Fatalf("no ETA at %s", s.At.Sub(t0))
		}
		actual := end.Sub(s.At)
		if e := math.Abs(eta.Seconds()-actual.Seconds()) / actual.Seconds(); e > 0.2 {
			t.Errorf("at %s (%d rows): ETA %s, actual %s: error %.0f%%", s.At.Sub(t0), s.Rows, eta, actual, 100*e)
		}
		avg := float64(s.Rows) / s.At.Sub(t0).Seconds()
		worstSinceStart = math.Max(worstSinceStart, math.Abs(float64(left)/avg-actual.Seconds())/actual.Seconds())
		checked++
	}
	if checked == 0 {
		t.Fatal("no sample past 10%")
	}
	if worstSinceStart <= 0.2 {
		t.Errorf("the since-start average was within 20%% too (worst %.0f%%): the scenario does not tell the estimators apart", 100*worstSinceStart)
	}
}
