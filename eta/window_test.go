package eta

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestWindowETA(t *testing.T) {
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
		{"under half the shortest window", []Sample{{at(0), 0, 0}, {at(0.5), 100, 0}, {at(0.9), 900, 0}}, 100, 0, 0, false},
		{"steady rows", []Sample{{at(0), 0, 0}, {at(10), 1000, 0}}, 500, 0, 5 * time.Second, true},
		{"bytes bind", []Sample{{at(0), 0, 0}, {at(10), 1000, 1000}}, 500, 2000, 20 * time.Second, true},
		{"nothing left", []Sample{{at(0), 0, 0}, {at(10), 1000, 1000}}, 0, 0, 0, true},
		{"paused: no estimate", []Sample{{at(0), 500, 500}, {at(10), 500, 500}}, 100, 100, 0, false},
		// only the last 60 s count: 100 rows/s then 10 rows/s
		{"window drops the old rate", []Sample{{at(0), 0, 0}, {at(100), 10000, 0}, {at(140), 10400, 0}, {at(200), 11000, 0}}, 1000, 0, 100 * time.Second, true},
		{"older sample ignored", []Sample{{at(0), 0, 0}, {at(10), 100, 0}, {at(5), 0, 0}}, 100, 0, 10 * time.Second, true},
		{"progress restarts", []Sample{{at(0), 0, 0}, {at(10), 1000, 0}, {at(20), 10, 0}, {at(30), 110, 0}}, 100, 0, 10 * time.Second, true},
		// 8 s old: the window is its last 4 s, at 1000 rows/s, not the
		// 100 rows/s of its first 4
		{"young copy forgets its start", []Sample{{at(0), 0, 0}, {at(4), 400, 0}, {at(5), 1400, 0}, {at(6), 2400, 0}, {at(7), 3400, 0}, {at(8), 4400, 0}}, 1000, 0, time.Second, true},
		// 1 s old: the window is never shorter than MinWindow
		{"shortest window", []Sample{{at(0), 0, 0}, {at(0.5), 100, 0}, {at(1), 1000, 0}}, 1000, 0, time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Window{Span: time.Minute}
			for _, s := range tc.samples {
				w.Add(s)
			}
			got, ok := w.ETA(tc.rowsLeft, tc.bytesLeft)
			if ok != tc.ok || (ok && got.Round(time.Millisecond) != tc.want) {
				t.Errorf("ETA = %s, %v; want %s, %v", got, ok, tc.want, tc.ok)
			}
			end, ok := w.End(tc.rowsLeft, tc.bytesLeft)
			if ok != tc.ok || (ok && end.Sub(w.samples[len(w.samples)-1].At) != got) {
				t.Errorf("End = %s, %v; want the last sample + ETA %s", end.Sub(t0), ok, got)
			}
		})
	}
}

// A throttled copy of 1M rows that starts slowly (warm-up, a throttle
// raised after a minute) and then runs at the rate it keeps: once 10% is
// done, the window's ETA is within 20% of the real remaining time, where the
// average since the start is not.
func TestWindowETAOnThrottledCopy(t *testing.T) {
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
	var w Window // DefaultWindow
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

// A throttled copy of 100,000 rows at 1,000 rows/s (chunks of a second's
// rows, as Throttle.ChunkRows cuts them, each taking 0.7-1.3 s) whose first
// 5 s run at a fifth of that (connections, a cold cache, an adaptive
// throttle feeling its way): from 10% on, the window's ETA is within 20% of
// the real remaining time. A window of a fixed 30 s still holds the slow
// start at 10% (14 s in).
func TestWindowETAAfterSlowStart(t *testing.T) {
	const total = 100_000
	rng := rand.New(rand.NewPCG(1, 2))
	var samples []Sample
	s, rows := 0.0, 0
	for rows < total {
		rate := 1000.0
		if s < 5 {
			rate = 200
		}
		s += 0.7 + 0.6*rng.Float64()
		rows += int(rate)
		samples = append(samples, Sample{At: at(s), Rows: int64(rows), Bytes: int64(rows) * 100})
	}
	end := samples[len(samples)-1].At
	// The window's end, and that of a window of a fixed 30 s.
	adaptive := func(w *Window, _ int) (time.Time, bool) { return w.End(total-w.samples[len(w.samples)-1].Rows, 0) }
	fixed := func(_ *Window, i int) (time.Time, bool) {
		s, j := samples[i], 0
		for j+1 < i && !samples[j+1].At.After(s.At.Add(-DefaultWindow)) {
			j++
		}
		rate := float64(s.Rows-samples[j].Rows) / s.At.Sub(samples[j].At).Seconds()
		return s.At.Add(time.Duration(float64(total-s.Rows) / rate * float64(time.Second))), true
	}
	worst := func(estimate func(*Window, int) (time.Time, bool)) (worst float64, where string) {
		var w Window
		for i, s := range samples {
			w.Add(s)
			// From 10% to the last few chunks (whose remaining time is
			// a chunk's luck).
			if s.Rows < total/10 || end.Sub(s.At) < 5*time.Second {
				continue
			}
			e, ok := estimate(&w, i)
			if !ok {
				t.Fatalf("no ETA at %s", s.At.Sub(t0))
			}
			actual := end.Sub(s.At)
			if err := math.Abs(e.Sub(end).Seconds()) / actual.Seconds(); err > worst {
				worst, where = err, fmt.Sprintf("at %s (%d rows): ETA %s, actual %s", s.At.Sub(t0).Round(time.Millisecond), s.Rows, e.Sub(s.At).Round(time.Millisecond), actual.Round(time.Millisecond))
			}
		}
		return worst, where
	}
	if w, where := worst(adaptive); w > 0.2 {
		t.Errorf("worst error %.0f%% %s", 100*w, where)
	} else {
		t.Logf("worst error %.0f%% %s", 100*w, where)
	}
	if w, where := worst(fixed); w <= 0.2 {
		t.Errorf("a fixed 30 s window was within 20%% too (worst %.0f%% %s): the scenario does not tell them apart", 100*w, where)
	}
}
