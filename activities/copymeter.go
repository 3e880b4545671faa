package activities

import (
	"sync"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/workflows"
)

// copyMeter follows one copy slice: what it has committed and its rate over
// a sliding window (backfill.RateWindow), from which the heartbeat (read by
// reshard status) and the ETA gauge take the time left. Estimating from the
// measured recent rate, not from the configured throttle or the average
// since the start, keeps the ETA right after a throttle change or a pause.
type copyMeter struct {
	mu          sync.Mutex
	win         backfill.RateWindow
	base, est   int64 // rows committed before the slice; the move's estimate
	rows, bytes int64 // committed by the slice
}

func (c *copyMeter) progress(p backfill.Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows, c.bytes = p.Rows, p.Bytes
	c.win.Add(backfill.Sample{At: time.Now(), Rows: p.Rows, Bytes: p.Bytes})
}

// eta is the time left at the window's rate; false when there is no honest
// estimate (no rate yet, or no progress in the window).
func (c *copyMeter) eta() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	left := c.est - c.base - c.rows
	if c.est <= 0 {
		return 0, false
	}
	if left <= 0 {
		return 0, true
	}
	return c.win.ETA(left, 0)
}

// heartbeat is the slice's heartbeat details: rows and bytes so far, and the
// ETA in milliseconds (-1: unknown).
func (c *copyMeter) heartbeat() map[string]int64 {
	eta, ok := c.eta()
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := int64(-1)
	if ok {
		ms = eta.Milliseconds()
	}
	return map[string]int64{workflows.HeartbeatSliceRows: c.rows, workflows.HeartbeatSliceBytes: c.bytes, workflows.HeartbeatETAMillis: ms}
}
