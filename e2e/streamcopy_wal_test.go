//go:build e2e

package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// The figure of #34 through the real workflow: the peak WAL a move's slot
// retains on its source during a copy of RESHARD_SLOTWAL_COPY (default 5m)
// under the writers' steady load, with the stream after the copy and with
// it beside the copy (--stream-during-copy), set against a lag budget of
// 30 s of the source server's WAL rate over the copy. Long (each run about
// the copy's length and a minute): run only with RESHARD_SLOTWAL=1.
func TestSlotWALStreamAfterCopy(t *testing.T)  { slotWAL(t, false) }
func TestSlotWALStreamDuringCopy(t *testing.T) { slotWAL(t, true) }

func slotWAL(t *testing.T, gated bool) {
	if os.Getenv("RESHARD_SLOTWAL") == "" {
		t.Skip("RESHARD_SLOTWAL=1 runs it (a copy of RESHARD_SLOTWAL_COPY, default 5m, per run)")
	}
	copyFor := 5 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("RESHARD_SLOTWAL_COPY")); err == nil {
		copyFor = d
	}
	wall(t)
	c := newCluster(t, 40_000)
	var rows int64
	for i := 1; i <= 4; i++ {
		db := c.dbs[shard(i)]
		rows += db.QueryInt64(t, `SELECT count(*) FROM users`) + db.QueryInt64(t, `SELECT count(*) FROM orders`)
	}
	perMove := float64(rows) / 5 / 4 // add-node of a fifth shard: a fifth of each shard's rows
	c.startWorker()
	c.startWriters()
	req := c.request("slotwal")
	req.StreamDuringCopy = gated
	req.ChunkRows = 50
	req.Throttle = workflows.Throttle{RowsPerSec: perMove / copyFor.Seconds()}
	run := c.start(req)
	deadline := time.Now().Add(copyFor + 10*time.Minute)
	c.planned(run, deadline)

	ctx := context.Background()
	lsn := func(i int) int64 {
		return c.dbs[shard(i)].QueryInt64(t, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`)
	}
	var start [5]int64
	for i := 1; i <= 4; i++ {
		start[i] = lsn(i)
	}
	began := time.Now()
	var peak [5]int64
	for {
		st, ok := c.state(run.GetID())
		if ok && allPast(st, workflows.PhaseSnapshotCopy) {
			break
		}
		if time.Now().After(deadline) || (ok && st.Phase.Terminal()) {
			t.Fatalf("the copy did not end: %s", c.describe(run.GetID()))
		}
		for i := 1; i <= 4; i++ {
			var n int64
			if err := c.dbs[shard(i)].Pool.QueryRow(ctx, `SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)), 0)::bigint
				FROM pg_replication_slots WHERE slot_name LIKE 'reshard%' AND database = current_database()`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			peak[i] = max(peak[i], n)
		}
		time.Sleep(time.Second)
	}
	took := time.Since(began)
	worst := 0.0
	for i := 1; i <= 4; i++ {
		rate := float64(lsn(i)-start[i]) / took.Seconds()
		budget := 30 * rate
		ratio := float64(peak[i]) / budget
		worst = max(worst, ratio)
		t.Logf("%s: peak retained WAL %s over a copy of %s; the server's WAL %s/s, lag budget (30 s) %s: %.2f× the budget",
			shard(i), workflows.HumanBytes(peak[i]), took.Round(time.Second), workflows.HumanBytes(int64(rate)), workflows.HumanBytes(int64(budget)), ratio)
	}
	st := c.wait(run, time.Until(deadline))
	c.stopWriters()
	doneState(t, st)
	c.checkData(st)
	t.Logf("stream during the copy %v: worst %.2f× the lag budget", gated, worst)
	if gated && worst >= 2 && took >= 5*time.Minute {
		t.Errorf("with the stream beside a copy of %s the slot retained %.2f× the lag budget; the goal is under 2×", took.Round(time.Second), worst)
	}
}
