package activities

import (
	"sync"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/workflows"
)

// copyMeter follows one copy slice: what it has committed and the move's
// rate over a sliding window (backfill.RateWindow), from which the heartbeat
// (read by reshard status), the slice's result (the UI's details) and the
// ETA gauge take when the copy should end. Estimating from the measured
// recent rate, not from the configured throttle or the average since the
// start, keeps the ETA right after a throttle change or a pause.
type copyMeter struct {
	mu          sync.Mutex
	win         backfill.RateWindow // over the move's rows (base + rows)
	base, est   int64               // rows committed before the slice; the move's estimate
	rows, bytes int64               // committed by the slice
	at          time.Time           // of the last committed chunk
}

func (c *copyMeter) progress(p backfill.Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows, c.bytes, c.at = p.Rows, p.Bytes, time.Now()
	c.win.Add(backfill.Sample{At: c.at, Rows: c.base + p.Rows})
}

// copyRates keeps each move's rate window from one copy slice to the next
// in this process. A window that started empty with every slice would
// never see the time between slices — the workflow's turn, the next slice's
// setup, the chunk the slice's deadline cut short — which took 3-5 s of
// every 20 on a busy machine (a 20-25% slower copy than its slices' rates
// said). A window left idle longer than DefaultRateWindow (a pause, a slice
// on another worker) is dropped: the rate before says nothing of the rate
// after.
type copyRates struct {
	mu sync.Mutex
	m  map[string]copyRate
}

type copyRate struct {
	win backfill.RateWindow
	at  time.Time // the last sample's
}

// meter starts a slice's meter with the move's window, which the slice
// owns until it keeps it again (a second attempt of the same slice running
// alongside starts its own).
func (r *copyRates) meter(move string, est, base int64) *copyMeter {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &copyMeter{est: est, base: base}
	if kept, ok := r.m[move]; ok && time.Since(kept.at) <= backfill.DefaultRateWindow {
		c.win, c.at = kept.win, kept.at
	}
	delete(r.m, move)
	return c
}

// keep hands the slice's window back for the move's next slice; a copy
// that is done keeps nothing.
func (r *copyRates) keep(move string, c *copyMeter, done bool) {
	c.mu.Lock()
	win, at := c.win, c.at
	c.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, kept := range r.m { // moves whose copy stopped here and went on elsewhere, or never
		if time.Since(kept.at) > backfill.DefaultRateWindow {
			delete(r.m, id)
		}
	}
	if done || at.IsZero() {
		return
	}
	if r.m == nil {
		r.m = map[string]copyRate{}
	}
	r.m[move] = copyRate{win: win, at: at}
}

// end is when the copy should end at the window's rate, anchored at the
// last committed chunk (RateWindow.End); false when there is no honest
// estimate (no rate yet, or no progress in the window). A copy past its
// row estimate is due now: how much more there is, nothing tells.
func (c *copyMeter) end() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.est <= 0 {
		return time.Time{}, false
	}
	left := c.est - c.base - c.rows
	if left <= 0 {
		return c.at, !c.at.IsZero()
	}
	return c.win.End(left, 0)
}

// heartbeat is the slice's heartbeat details at now: rows and bytes so far,
// when the copy should end (Unix ms) and the time left from now (-1:
// unknown); the ETA gauge is set to the same time left.
func (c *copyMeter) heartbeat(now time.Time) (details map[string]int64, left time.Duration, ok bool) {
	end, ok := c.end()
	c.mu.Lock()
	defer c.mu.Unlock()
	endMs, leftMs := int64(-1), int64(-1)
	if ok {
		left = max(end.Sub(now), 0)
		endMs, leftMs = end.UnixMilli(), left.Milliseconds()
	}
	return map[string]int64{
		workflows.HeartbeatSliceRows: c.rows, workflows.HeartbeatSliceBytes: c.bytes,
		workflows.HeartbeatCopyEndMillis: endMs, workflows.HeartbeatETAMillis: leftMs,
	}, left, ok
}
