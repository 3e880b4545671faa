package backfill

import (
	"math"
	"time"
)

// Sample is a copy's cumulative progress at one moment.
type Sample struct {
	At    time.Time
	Rows  int64
	Bytes int64
}

// RateWindow keeps the samples of the last Span (and the one just before it,
// so the window is covered whole) and estimates the copy's rate over them: a
// throttle change, a pause or a slow start stop counting once they are Span
// old, where a rate since the start would carry them to the end. Pure: the
// caller supplies the clock in each Sample.
type RateWindow struct {
	Span    time.Duration // default DefaultRateWindow
	samples []Sample
}

// DefaultRateWindow is RateWindow's default span: long enough to smooth the
// chunk-by-chunk progress of a throttled copy, short enough that a throttle
// change is forgotten within half a minute.
const DefaultRateWindow = 30 * time.Second

// Add records a sample. Samples must come in time order; an older one than
// the last is ignored, and so is progress that goes backwards (a new run
// counting from zero): the window starts again from it.
func (w *RateWindow) Add(s Sample) {
	if n := len(w.samples); n > 0 {
		last := w.samples[n-1]
		if s.At.Before(last.At) {
			return
		}
		if s.Rows < last.Rows || s.Bytes < last.Bytes {
			w.samples = w.samples[:0]
		}
	}
	w.samples = append(w.samples, s)
	span := w.Span
	if span <= 0 {
		span = DefaultRateWindow
	}
	// Drop samples older than the window, keeping the newest of them.
	cut := 0
	for cut+1 < len(w.samples) && !w.samples[cut+1].At.After(s.At.Add(-span)) {
		cut++
	}
	if cut > 0 {
		w.samples = append(w.samples[:0], w.samples[cut:]...)
	}
}

// Rate is the rows and bytes per second over the window; ok is false until
// two samples some time apart exist.
func (w *RateWindow) Rate() (rowsPerSec, bytesPerSec float64, ok bool) {
	if len(w.samples) < 2 {
		return 0, 0, false
	}
	first, last := w.samples[0], w.samples[len(w.samples)-1]
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 {
		return 0, 0, false
	}
	return float64(last.Rows-first.Rows) / dt, float64(last.Bytes-first.Bytes) / dt, true
}

// ETA is the time left to copy rowsLeft rows and bytesLeft bytes at the
// window's rate: the longer of the two estimates (rows or bytes, whichever
// the throttle or the machine binds on), counted from the last sample.
// ok is false without a rate, or when nothing moved in the window (paused,
// throttled to zero): no honest estimate exists then.
func (w *RateWindow) ETA(rowsLeft, bytesLeft int64) (time.Duration, bool) {
	rr, br, ok := w.Rate()
	if !ok {
		return 0, false
	}
	if rowsLeft <= 0 && bytesLeft <= 0 {
		return 0, true
	}
	secs := 0.0
	for _, d := range [][2]float64{{float64(rowsLeft), rr}, {float64(bytesLeft), br}} {
		if d[0] <= 0 {
			continue
		}
		if d[1] <= 0 { // work left that did not move in the window
			return 0, false
		}
		secs = math.Max(secs, d[0]/d[1])
	}
	if secs >= float64(math.MaxInt64/int64(time.Second)) {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}
