package activities

import (
	"sync"
	"time"

	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// verifyMeter follows a running verify for its heartbeat: rows compared of
// those expected, chunks done of the plan, and when it should end at the
// rate of this attempt. Chunks accepted from an earlier attempt count as
// done but not in the rate.
type verifyMeter struct {
	mu         sync.Mutex
	est        int64
	chunks     int64 // this attempt's compared chunks, as the old "chunks" key
	total      int64 // the plan's chunks (0: not planned yet)
	reused     int64
	rows       int64 // compared by this attempt
	reusedRows int64
	started    time.Time // when comparing began (the plan made)
	// limit is the rows/s the throttle lets through now (0: none): a chunk
	// is compared first and waited for after, so the rate right after a
	// chunk runs ahead of the throttle (the walk showed an ETA of 1s at 31%
	// under 400 rows/s).
	limit func() float64
}

func newVerifyMeter(est int64, limit func() float64) *verifyMeter {
	return &verifyMeter{est: max(est, 0), limit: limit}
}

func (v *verifyMeter) planned(p verify.PlanInfo, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.total, v.reused, v.reusedRows, v.started = int64(p.Chunks), int64(p.Reused), p.ReusedRows, now
	// A new verify.Run (after a wait for the shards' schemas): what the
	// last one compared is among the reused chunks now, or compared again.
	v.chunks, v.rows = 0, 0
}

func (v *verifyMeter) chunk(c verify.ChunkReport) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.chunks++
	v.rows += c.Rows
}

// heartbeat is the verify's heartbeat details at now (workflows.HeartbeatVerify*).
func (v *verifyMeter) heartbeat(now time.Time) map[string]int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	rows := v.rows + v.reusedRows
	done := v.chunks + v.reused
	est := v.est
	if rows > est {
		est = rows // the estimate was low: what is compared is the floor
	}
	end := int64(-1)
	if elapsed := now.Sub(v.started); !v.started.IsZero() && v.chunks > 0 && elapsed > 0 {
		// The share left, by rows while the estimate holds, else by chunks.
		left := -1.0
		rate := float64(v.rows) / elapsed.Seconds()
		if v.limit != nil {
			if lim := v.limit(); lim > 0 && rate > lim {
				rate = lim
			}
		}
		switch {
		case v.total > 0 && done >= v.total:
			left = 0
		case rows < v.est && v.rows > 0:
			left = float64(v.est-rows) / rate
		case v.total > 0:
			left = float64(v.total-done) / (float64(v.chunks) / elapsed.Seconds())
		}
		if left >= 0 {
			end = now.Add(time.Duration(left * float64(time.Second))).UnixMilli()
		}
	}
	return map[string]int64{
		"chunks":                            v.chunks,
		workflows.HeartbeatVerifyRows:       rows,
		workflows.HeartbeatVerifyEstRows:    est,
		workflows.HeartbeatVerifyChunksDone: done,
		workflows.HeartbeatVerifyChunks:     v.total,
		workflows.HeartbeatVerifyEndMillis:  end,
	}
}
