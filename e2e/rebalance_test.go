//go:build e2e

package e2e

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// TestRebalanceFourToSixTwoWorkers (issue #16): 4 → 6 shards by one
// rebalance, planned with the least movement (2/6 of the token space, each
// range moved once), run by two worker processes on one task queue; one is
// SIGKILLed while the moves copy and never restarted: the other finishes
// every move, nothing acknowledged is lost, every row ends on its owner.
func TestRebalanceFourToSixTwoWorkers(t *testing.T) {
	wall(t)
	c := newCluster(t, 8_000)
	c.addShard(6)
	c.startWorker()
	victim, victimExited := c.worker, c.exited
	c.startWorker()
	c.startWriters()
	req := c.request("e2e_rebal")
	req.Kind, req.Shard, req.Add = workflows.KindRebalance, "", []string{shard(5), shard(6)}
	req.Throttle = workflows.Throttle{RowsPerSec: 300} // a copy long enough to kill a worker in
	run := c.start(req)
	deadline := time.Now().Add(6 * time.Minute)
	c.waitFor(run, deadline, "a move copying", func(st workflows.MigrationState) bool {
		_, ok := anyIn(st, workflows.PhaseSnapshotCopy)
		return ok
	})
	time.Sleep(2 * time.Second)
	_ = victim.Process.Kill()
	<-victimExited
	t.Logf("worker 1 (pid %d) killed while the moves copy; worker 2 carries on alone", victim.Process.Pid)

	st := c.wait(run, time.Until(deadline))
	c.stopWriters()
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("rebalance ended %s: %s\n%s", st.Phase, st.Error, c.workerLogs())
	}
	if math.Abs(st.MovedFraction-2.0/6) > 0.01 {
		t.Fatalf("moved fraction %.4f, want 2/6 (the least a 4 → 6 change can move)", st.MovedFraction)
	}
	var targets []string
	for _, m := range st.Moves {
		if m.Phase != workflows.PhaseDone || m.Verify == nil || !m.Verify.Passed {
			t.Fatalf("move %s: %s", m.Spec.ID, m.Phase)
		}
		if !slices.Contains(targets, m.Spec.Target) {
			targets = append(targets, m.Spec.Target)
		}
		if m.Spec.Target != shard(5) && m.Spec.Target != shard(6) {
			t.Fatalf("move %s goes %s → %s: only the new shards receive", m.Spec.ID, m.Spec.Source, m.Spec.Target)
		}
	}
	t.Logf("rebalance: moved %.4f of the space in %d moves to %v: %s", st.MovedFraction, len(st.Moves), targets, summary(st))
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !cur.Ring.HasShard(shard(6)) {
		t.Fatal("shard6 is not in the final ring")
	}
	c.checkData(st) // every user on its owner once, every order, the ledger
}
