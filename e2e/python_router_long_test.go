//go:build e2e

package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// TestPythonRouterThroughAddNode (build tag e2e: about 40 s, so make e2e
// runs it, not make test): the Python writer and the Go writers write
// throughout an add-node whose worker is SIGKILLed once in
// SNAPSHOT_COPY; after it, every write the Python writer acknowledged is on
// the owner of its key and nowhere else (0 lost, 0 duplicated), its strict
// read-backs saw every acknowledged value, and the control database says
// every move ended with the old owner cleaned (reshard.moves, settled).
func TestPythonRouterThroughAddNode(t *testing.T) {
	py := pythonWithPsycopg(t)
	c := newCluster(t, 5_000)
	if out, code := c.cli("keyspace", "add-table", "users:id", "orders:user_id"); code != 0 {
		t.Fatalf("keyspace add-table: exit %d\n%s", code, out)
	}
	c.startWorker()
	c.startWriters()

	pyw := startPythonWriter(t, py, c, "2000001-2000300")

	started := time.Now()
	req := c.request("e2e_py")
	req.Throttle = workflows.Throttle{RowsPerSec: 100} // a copy long enough to kill the worker in
	run := c.start(req)
	killed := false
	deadline := time.Now().Add(3 * time.Minute)
	for !killed {
		st, ok := c.state(run.GetID())
		if ok {
			if m, hit := anyIn(st, workflows.PhaseSnapshotCopy); hit {
				c.killWorker()
				c.startWorker()
				killed = true
				t.Logf("worker killed with move %s in SNAPSHOT_COPY", m)
			} else if beyond(st, workflows.PhaseSnapshotCopy) || st.Phase.Terminal() {
				t.Fatalf("no move was seen in SNAPSHOT_COPY (moves: %s)", phasesNow(st))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the migration never reached SNAPSHOT_COPY: %s", c.describe(run.GetID()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := c.wait(run, time.Until(deadline)+time.Minute)
	t.Logf("add-node with the worker killed once: %s, moves: %s", time.Since(started).Round(time.Second), summary(st))
	// A little more on the final topology, then stop the Python writer.
	time.Sleep(time.Second)
	sum, l, _ := pyw.finish()
	c.stopWriters()
	checkState(t, st, false)
	c.checkData(st) // every user on its owner, once; the Go writers' ledger

	ctx := context.Background()
	cur, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Python writer: %d acknowledged, %d unknown, %d strict reads, %d fence retries, topology versions written with %v; errors: %v",
		sum.Acked, sum.Unknown, sum.Reads, sum.FenceRetries, sum.Versions, sum.Errors)
	mm, err := l.Check(ctx, usersTable, c.pools, cur.Ring.OwnerInt64)
	if err != nil {
		t.Fatal(err)
	}
	failOnMismatches(t, mm, "writes the Python router acknowledged are lost or wrong")
	// The router retries fence refusals (a cutover's write pause is far
	// below its 10 s budget) and nothing else failed here: no write may end
	// with an unknown outcome.
	if sum.Unknown != 0 {
		t.Fatalf("%d writes of the Python router failed: %v", sum.Unknown, sum.Errors)
	}
	if sum.StaleReads != 0 || sum.Reads == 0 {
		t.Fatalf("strict reads: %d of %d returned another value than the acknowledged one: %v", sum.StaleReads, sum.Reads, sum.Errors)
	}
	// It followed the topology to the end: it wrote under the final version.
	if !slices.Contains(sum.Versions, cur.Version) || len(sum.Versions) < 2 {
		t.Fatalf("the Python router wrote with versions %v; the final one is v%d", sum.Versions, cur.Version)
	}
	// The control database says the move is over: every move cleaned up,
	// every range settled.
	var cleaned int64
	var settled bool
	if err := c.ctl.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'cleaned_up'), reshard.settled('default') FROM reshard.moves WHERE migration_id = $1`, req.ID).
		Scan(&cleaned, &settled); err != nil {
		t.Fatal(err)
	}
	if cleaned != int64(len(st.Moves)) || !settled {
		t.Fatalf("reshard.moves: %d of %d moves cleaned up, keyspace settled: %v", cleaned, len(st.Moves), settled)
	}
	if out, code := c.cli("check", "placement"); code != 0 {
		t.Fatalf("reshard check placement after the add-node: exit %d\n%s", code, out)
	}
}
