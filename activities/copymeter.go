package activities

import (
	"sync"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/workflows"
)

// copyMeter follows one copy slice: what it has committed and its rate over
// a sliding window (backfill.RateWindow), from which the heartbeat (read by
// reshard status), the slice's result (the UI's details) and the ETA gauge
// take when the copy should end. Estimating from the measured recent rate,
// not from the configured throttle or the average since the start, keeps
// the ETA right after a throttle change or a pause.
type copyMeter struct {
	mu          sync.Mutex
	win         backfill.RateWindow
	base, est   int64 // rows committed before the slice; the move's estimate
	rows, bytes int64 // committed by the slice
	at          time.Time
}

func (c *copyMeter) progress(p backfill.Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows, c.bytes, c.at = p.Rows, p.Bytes, time.Now()
	c.win.Add(backfill.Sample{At: c.at, Rows: p.Rows, Bytes: p.Bytes})
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
