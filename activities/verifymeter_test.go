package activities

import (
	"testing"
	"time"

	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// TestVerifyMeter: the verify's heartbeat carries rows compared of the
// expected, chunks done of the plan and an end at this attempt's rate, with
// chunks an earlier attempt verified counted as done but not in the rate.
func TestVerifyMeter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	limit := 0.0
	v := newVerifyMeter(12000, func() float64 { return limit })
	hb := v.heartbeat(t0)
	if hb[workflows.HeartbeatVerifyChunks] != 0 || hb[workflows.HeartbeatVerifyEndMillis] != -1 || hb[workflows.HeartbeatVerifyEstRows] != 12000 {
		t.Fatalf("before the plan: %v", hb)
	}
	v.planned(verify.PlanInfo{Chunks: 6, Reused: 1, ReusedRows: 2000}, t0)
	v.chunk(verify.ChunkReport{Rows: 2000})
	v.chunk(verify.ChunkReport{Rows: 2000})
	hb = v.heartbeat(t0.Add(4 * time.Second)) // 4000 rows in 4 s: 6000 left, 6 s
	want := map[string]int64{"chunks": 2, workflows.HeartbeatVerifyRows: 6000, workflows.HeartbeatVerifyEstRows: 12000,
		workflows.HeartbeatVerifyChunksDone: 3, workflows.HeartbeatVerifyChunks: 6,
		workflows.HeartbeatVerifyEndMillis: t0.Add(10 * time.Second).UnixMilli()}
	for k, w := range want {
		if hb[k] != w {
			t.Errorf("%s = %d, want %d (%v)", k, hb[k], w, hb)
		}
	}
	// More rows than estimated: the estimate rises to what was compared,
	// and the end is reckoned by chunks (1 left, at 1 per 2 s).
	for range 2 {
		v.chunk(verify.ChunkReport{Rows: 4000})
	}
	hb = v.heartbeat(t0.Add(8 * time.Second))
	if hb[workflows.HeartbeatVerifyRows] != 14000 || hb[workflows.HeartbeatVerifyEstRows] != 14000 ||
		hb[workflows.HeartbeatVerifyEndMillis] != t0.Add(10*time.Second).UnixMilli() {
		t.Errorf("past the estimate: %v", hb)
	}
	// A throttle below the measured rate bounds it: 400 rows/s with the
	// estimate raised to 20000 leaves 6000 rows, 15 s.
	limit, v.est = 400, 20000
	if hb = v.heartbeat(t0.Add(8 * time.Second)); hb[workflows.HeartbeatVerifyEndMillis] != t0.Add(23*time.Second).UnixMilli() {
		t.Errorf("under a 400 rows/s throttle: end %d, want %d", hb[workflows.HeartbeatVerifyEndMillis], t0.Add(23*time.Second).UnixMilli())
	}
	limit, v.est = 0, 12000
	v.chunk(verify.ChunkReport{Rows: 1})
	if hb = v.heartbeat(t0.Add(9 * time.Second)); hb[workflows.HeartbeatVerifyEndMillis] != t0.Add(9*time.Second).UnixMilli() {
		t.Errorf("every chunk done: end %d, want now", hb[workflows.HeartbeatVerifyEndMillis])
	}
}
