//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// TestSplitReverifyRemoveNodeAsLeastPrivilegedRole runs, with reshard
// connected everywhere as the role of deploy/reshard-role.sql and the
// application writing as its tables' owner (leastPrivilegedCluster), the
// migration verbs TestAddNodeAsLeastPrivilegedRole does not, each started
// from the CLI as that role under live writes: the keyspace registered
// (keyspace add-table), a split whose verify fails on a row planted on the
// new shard and passes after a reverify, then a remove-node of the new
// shard. No statement of the worker is refused for want of a privilege, no
// acknowledged write is lost, every row ends on its owner, topology check
// is clean and nothing of the moves is left after each.
func TestSplitReverifyRemoveNodeAsLeastPrivilegedRole(t *testing.T) {
	c, reshard, admin := leastPrivilegedCluster(t, 3_000)
	if out, code := c.cli("keyspace", "add-table", "users:id", "orders:user_id"); code != 0 {
		t.Fatalf("keyspace add-table as %s: exit %d\n%s", reshard, code, out)
	}
	c.startWorker()
	c.startWriters()

	started := time.Now()
	// The copy throttled: the rows are planted before verify.
	out, code := c.cli("split", shard(2), "--into", shard(5), "--id", "e2e-priv-split", "--grace", "2s", "--rows-per-sec", "200")
	if code != 0 {
		t.Fatalf("split as %s: exit %d\n%s", reshard, code, out)
	}
	run := c.tc.GetWorkflow(context.Background(), workflows.MigrationWorkflowID("e2e-priv-split"), "")
	deadline := time.Now().Add(3 * time.Minute)
	st := c.waitFor(run, deadline, "the split's plan", func(st workflows.MigrationState) bool { return len(st.Moves) > 0 })
	conn := admin[shard(5)].Conn(t) // a session of its own: the replica role stays in it
	if _, err := conn.Exec(context.Background(), `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	var planted []int64
	for _, m := range st.Moves {
		k := int64(9_000_000 + 1_000*len(planted))
		for !ring.ContainsAny(m.Spec.Ranges, ring.TokenInt64(k)) {
			k++
		}
		planted = append(planted, k)
		if _, err := conn.Exec(context.Background(), `INSERT INTO users VALUES ($1, 'planted', 0)`, k); err != nil {
			t.Fatal(err)
		}
	}
	c.waitFor(run, deadline, "every move's verify to fail", func(st workflows.MigrationState) bool {
		for _, m := range st.Moves {
			if m.Verify == nil || m.Verify.Passed || m.Waiting != workflows.WaitVerdict {
				return false
			}
		}
		return true
	})
	if _, err := conn.Exec(context.Background(), `DELETE FROM users WHERE id = ANY($1)`, planted); err != nil {
		t.Fatal(err)
	}
	if out, code := c.cli("reverify", "e2e-priv-split"); code != 0 {
		t.Fatalf("reverify as %s: exit %d\n%s", reshard, code, out)
	}
	st = c.wait(run, time.Until(deadline))
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("split ended %s: %s\n%s", st.Phase, st.Error, c.workerLogs())
	}
	c.recordHistories(st, "split-reverify") // a failed verify, its verdict's wait and a reverify, for the replay test
	for _, m := range st.Moves {
		if m.Verify == nil || !m.Verify.Passed || m.Verify.Rows == 0 {
			t.Fatalf("move %s: verify after the reverify: %+v", m.Spec.ID, m.Verify)
		}
	}
	t.Logf("split as %s, reverified: %s, moves: %s", reshard, time.Since(started).Round(time.Second), summary(st))
	// The ledger is checked with the writers stopped: a row read while a
	// writer goes on can be older than a write acknowledged just after the
	// read (seen once at load average 30: "key 352 on shard3" a write behind).
	c.stopWriters()
	c.checkLeastPrivilegedStep("split", st)
	c.startWriters()

	started = time.Now()
	out, code = c.cli("remove-node", shard(5), "--id", "e2e-priv-rm", "--grace", "2s")
	if code != 0 {
		t.Fatalf("remove-node as %s: exit %d\n%s", reshard, code, out)
	}
	st = c.wait(c.tc.GetWorkflow(context.Background(), workflows.MigrationWorkflowID("e2e-priv-rm"), ""), 3*time.Minute)
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("remove-node ended %s: %s\n%s", st.Phase, st.Error, c.workerLogs())
	}
	t.Logf("remove-node as %s: %s, moves: %s", reshard, time.Since(started).Round(time.Second), summary(st))
	c.stopWriters()
	c.checkLeastPrivilegedStep("remove-node", st)
	if sh, err := c.store.Shard(context.Background(), shard(5)); err != nil || sh.State != topology.ShardRemoved {
		t.Fatalf("shard5 after remove-node: %+v %v", sh, err)
	}
	c.refusedPrivileges()
}
