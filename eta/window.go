package eta

import (
	"time"
)

// Sample is a copy's cumulative progress at one moment.
type Sample struct {
	At    time.Time
	Rows  int64
	Bytes int64
}

// Window estimates a copy's rate over its recent samples, so that a
// throttle change, a pause or a slow start stop counting once they are a
// window old, where a rate since the start would carry them to the end.
//
// The window's span grows with the copy: half the time since its first
// sample, at least MinSpan and at most Span. A copy a few seconds old is
// judged on its last second or two (its start — connections, cold caches, a
// throttle's first bucket — is forgotten as quickly as it happened); a long
// one on its last Span, which smooths the chunk-by-chunk progress of a
// throttled copy. Pure: the caller supplies the clock in each Sample.
type Window struct {
	Span    time.Duration // the longest window; default DefaultWindow
	MinSpan time.Duration // the shortest; default MinWindow
	first   time.Time     // the first sample since the copy (re)started
	samples []Sample
}

// DefaultWindow is Window's longest span: long enough to smooth the
// chunk-by-chunk progress of a throttled copy, short enough that a throttle
// change is forgotten within half a minute.
const DefaultWindow = 30 * time.Second

// MinWindow is Window's shortest span: a second's worth of chunks is
// too few to tell a rate from the luck of one chunk. No rate is told before
// the samples cover half of it: the first few chunks of a copy (a burst
// before the other moves' copies start, a cold cache) said 2-4 times the
// rate of the next seconds in the demo.
const MinWindow = 2 * time.Second

// Add records a sample. Samples must come in time order; an older one than
// the last is ignored, and so is progress that goes backwards (a new run
// counting from zero): the window starts again from it.
func (w *Window) Add(s Sample) {
	if n := len(w.samples); n > 0 {
		last := w.samples[n-1]
		if s.At.Before(last.At) {
			return
		}
		if s.Rows < last.Rows || s.Bytes < last.Bytes {
			w.samples = w.samples[:0]
		}
	}
	if len(w.samples) == 0 {
		w.first = s.At
	}
	w.samples = append(w.samples, s)
	// Drop samples older than the longest window, keeping the newest of them.
	cut := w.start(s.At, w.maxSpan())
	if cut > 0 {
		w.samples = append(w.samples[:0], w.samples[cut:]...)
	}
}

func (w *Window) maxSpan() time.Duration {
	if w.Span > 0 {
		return w.Span
	}
	return DefaultWindow
}

func (w *Window) minSpan() time.Duration {
	if w.MinSpan > 0 {
		return w.MinSpan
	}
	return MinWindow
}

// span is the window at time now: half the copy's age, within [MinSpan, Span].
func (w *Window) span(now time.Time) time.Duration {
	return min(max(now.Sub(w.first)/2, w.minSpan()), w.maxSpan())
}

// start is the index of the window's first sample: the newest one at least
// span before now, so that the window is covered whole (or the oldest).
func (w *Window) start(now time.Time, span time.Duration) int {
	i := 0
	for i+1 < len(w.samples) && !w.samples[i+1].At.After(now.Add(-span)) {
		i++
	}
	return i
}

// Rate is the rows and bytes per second over the window; ok is false until
// the samples cover half of MinSpan.
func (w *Window) Rate() (rowsPerSec, bytesPerSec float64, ok bool) {
	if len(w.samples) < 2 {
		return 0, 0, false
	}
	last := w.samples[len(w.samples)-1]
	if last.At.Sub(w.samples[0].At) < w.minSpan()/2 {
		return 0, 0, false
	}
	first := w.samples[w.start(last.At, w.span(last.At))]
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 {
		return 0, 0, false
	}
	return float64(last.Rows-first.Rows) / dt, float64(last.Bytes-first.Bytes) / dt, true
}

// ETA is the time left to copy rowsLeft rows and bytesLeft bytes at the
// window's rate (Rate.Time), counted from the last sample. ok is false
// without a rate, or when nothing moved in the window (paused, throttled to
// zero): no honest estimate exists then.
func (w *Window) ETA(rowsLeft, bytesLeft int64) (time.Duration, bool) {
	rr, br, ok := w.Rate()
	if !ok {
		return 0, false
	}
	return Rate{Rows: rr, Bytes: br}.Time(rowsLeft, bytesLeft)
}

// End is when the copy should end: the last sample's time plus the ETA of
// what was left at it. The work left is known as of the last sample, so the
// estimate is anchored there, not at whenever it is read: an estimate read
// later (a heartbeat recorded a second ago, a status shown after it) is the
// same instant, and the time left is End minus the reader's clock.
func (w *Window) End(rowsLeft, bytesLeft int64) (time.Time, bool) {
	eta, ok := w.ETA(rowsLeft, bytesLeft)
	if !ok {
		return time.Time{}, false
	}
	return w.samples[len(w.samples)-1].At.Add(eta), true
}
