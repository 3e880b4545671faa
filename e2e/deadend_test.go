//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// No dead end (issue 35): every way a migration's workflow can end leaves
// a cluster that is clean, or that one documented verb makes clean.

// leftNothing fails the test unless no reshard slot or publication is left
// on any shard and reshard topology check agrees (exit 0).
func (c *cluster) leftNothing(what string) {
	t := c.t
	t.Helper()
	for name, db := range c.dbs {
		for kind, q := range map[string]string{
			"slots":        `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`,
			"publications": `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'reshard%'`,
		} {
			if n := db.QueryInt64(t, q); n != 0 {
				t.Fatalf("%s: %d %s left on %s", what, n, kind, name)
			}
		}
	}
	if n := c.ctl.QueryInt64(t, `SELECT count(*) FROM reshard.fence_hold`); n != 0 {
		t.Fatalf("%s: %d fence holds left", what, n)
	}
	if out, code := c.cli("topology", "check"); code != 0 {
		t.Fatalf("%s: reshard topology check: exit %d\n%s", what, code, out)
	}
}

// registerKeyspace registers the cluster's tables (topology check and
// recover read the keyspace's tables from the control database).
func (c *cluster) registerKeyspace() {
	c.t.Helper()
	if out, code := c.cli("keyspace", "add-table", "users:id", "orders:user_id"); code != 0 {
		c.t.Fatalf("keyspace add-table: exit %d\n%s", code, out)
	}
}

// awaitMoves waits until every move of the migration satisfies ok.
func (c *cluster) awaitMoves(id string, timeout time.Duration, what string, ok func(workflows.MigrationState) bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, got := c.state(id)
		if got && len(st.Moves) == 4 && ok(st) {
			return
		}
		if time.Now().After(deadline) || st.Phase.Terminal() {
			c.t.Fatalf("moves did not reach %s: %s\n%s", what, c.describe(id), c.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCancelInTheUIRollsBack: the Temporal UI's Request Cancellation (here
// the client's CancelWorkflow, what the button sends) during the copy,
// under writers. The migration rolls back by itself: ROLLED_BACK, shard5
// out of the ring and empty, every write on its owner, nothing left, topology
// check clean. On 6e755b7 it ended FAILED with the ranges migrating, slots
// retaining WAL and guards on, and no verb could clean up.
func TestCancelInTheUIRollsBack(t *testing.T) {
	c := newCluster(t, 5_000)
	c.registerKeyspace()
	c.startWorker()
	c.startWriters()
	req := c.request("e2e_cancel")
	req.Throttle.RowsPerSec, req.ChunkRows = 40, 20 // a copy of ~650 rows per move that lasts ~15 s
	run := c.start(req)
	c.awaitMoves(run.GetID(), 3*time.Minute, "SNAPSHOT_COPY", func(st workflows.MigrationState) bool {
		copied := false
		for _, m := range st.Moves {
			if order(m.Phase) > order(workflows.PhaseSnapshotCopy) {
				t.Fatalf("move %s reached %s before the cancel: the copy is too fast for this test", m.Spec.ID, m.Phase)
			}
			copied = copied || m.RowsCopied > 0
		}
		return copied
	})
	if err := c.tc.CancelWorkflow(context.Background(), run.GetID(), ""); err != nil {
		t.Fatal(err)
	}
	st := c.wait(run, 3*time.Minute)
	c.stopWriters()
	if st.Phase != workflows.PhaseRolledBack {
		t.Fatalf("cancelled migration ended %s: %s", st.Phase, summary(st))
	}
	for _, m := range st.Moves {
		if m.Phase != workflows.PhaseRolledBack {
			t.Fatalf("move %s ended %s", m.Spec.ID, m.Phase)
		}
	}
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Migrating()) != 0 || cur.Ring.HasShard(shard(5)) {
		t.Fatalf("topology v%d after the cancel: %d migrating, shard5 in ring %v", cur.Version, len(cur.Migrating()), cur.Ring.HasShard(shard(5)))
	}
	if n := c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM users`) + c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("%d rows left on shard5 after the cancel", n)
	}
	c.checkPlacement(cur)
	c.leftNothing("after the cancel")
	// A new migration is accepted.
	if out, code := c.cli("plan", "add-node", shard(5)); code != 0 {
		t.Fatalf("plan after the cancel: exit %d\n%s", code, out)
	}
}

// TestTerminateThenRecover: the migration is terminated in GRACE (the UI's
// Terminate), under writers. topology check reports it (exit 1, naming
// reshard recover); recover completes the moves (their cutovers were
// published): shard5 in the ring and active, every row on its owner once,
// nothing left, topology check clean; a second recover changes nothing.
func TestTerminateThenRecover(t *testing.T) {
	c := newCluster(t, 5_000)
	c.registerKeyspace()
	c.startWorker()
	c.startWriters()
	req := c.request("e2e-term")
	req.GracePeriod = new(10 * time.Minute)
	run := c.start(req)
	c.awaitMoves(run.GetID(), 3*time.Minute, "GRACE", func(st workflows.MigrationState) bool { return allPast(st, workflows.PhaseCutover) })
	time.Sleep(time.Second) // writes on shard5, through GRACE's reverse streams
	if err := c.tc.TerminateWorkflow(context.Background(), run.GetID(), "", "operator pressed Terminate"); err != nil {
		t.Fatal(err)
	}
	out, code := c.cli("topology", "check")
	if code != 1 || !strings.Contains(out, "migration e2e-term: its workflow has ended (terminated") || !strings.Contains(out, "fix: reshard recover e2e-term") {
		t.Fatalf("check after Terminate: exit %d\n%s", code, out)
	}
	if out, code := c.cli("rollback", "e2e-term"); code != 3 || !strings.Contains(out, "reshard recover e2e-term") {
		t.Fatalf("rollback after Terminate: exit %d, want it refused naming recover\n%s", code, out)
	}
	// The terminated workflows' streams stop when their activities next
	// heartbeat (5 s here): until then recover finds their slots active,
	// fails, and is run again.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, code = c.cli("recover", "e2e-term")
		if code == 0 || time.Now().After(deadline) {
			break
		}
		t.Logf("recover: exit %d (run again)\n%s", code, out)
		time.Sleep(3 * time.Second)
	}
	if code != 0 || strings.Count(out, ": completed") != 4 {
		t.Fatalf("recover: exit %d, want 4 moves completed\n%s\n%s", code, out, c.workerLogs())
	}
	t.Logf("recover:\n%s", out)
	time.Sleep(time.Second)
	c.stopWriters()
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Migrating()) != 0 || !cur.Ring.HasShard(shard(5)) {
		t.Fatalf("topology v%d after recover: %d migrating, shard5 in ring %v", cur.Version, len(cur.Migrating()), cur.Ring.HasShard(shard(5)))
	}
	c.checkPlacement(cur)
	c.leftNothing("after recover")
	if out, code := c.cli("recover", "e2e-term"); code != 0 || !strings.Contains(out, "nothing left to recover") {
		t.Fatalf("recover again: exit %d\n%s", code, out)
	}
	if v, _ := c.store.Current(context.Background()); v.Version != cur.Version {
		t.Fatalf("a second recover published v%d", v.Version)
	}
}
