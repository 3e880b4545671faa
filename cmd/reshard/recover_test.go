package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// leaveBehind makes what a migration's workflow leaves when it ends in
// CDC_CATCH_UP without finishing (terminated, its history lost): its plan
// stored, a range of shard1 migrating to shard2 in the topology, the
// guards on, the publication and the slot on shard1, the copy on shard2.
func leaveBehind(t *testing.T, c *testCluster, id string) ring.Range {
	t.Helper()
	ctx := context.Background()
	store := topology.NewStore(c.control.Pool)
	cur, err := store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var rg ring.Range
	for _, r := range cur.Ring.Ranges("shard1") {
		if r.Lo < r.Hi && r.Hi-r.Lo > 4 {
			rg = ring.Range{Lo: r.Lo, Hi: r.Lo + (r.Hi-r.Lo)/2}
			break
		}
	}
	after, moves, err := ring.PlanMove(cur.Ring, rg, "shard2")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SavePlan(ctx, topology.Plan{MigrationID: id, FromVersion: cur.Version, Before: cur.Ring, After: after, Moves: moves}); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.StartMigration(ctx, store, id, "move", cur.Version, cur.Ring, after,
		[]topology.MoveRanges{{Source: "shard1", Target: "shard2", Ranges: []ring.Range{rg}}}, nil); err != nil {
		t.Fatal(err)
	}
	spec := tableset.Spec{Name: "default", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"}}}
	move := topology.MoveID(id, 1)
	names, err := cdc.NamesFor(move)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := c.shards["shard1"], c.shards["shard2"]
	set, err := tableset.Introspect(ctx, dst.Pool, spec, "shard2")
	if err != nil {
		t.Fatal(err)
	}
	for name, db := range map[string]*pgtest.DB{"shard1": src, "shard2": dst} {
		if _, err := fence.Reconcile(ctx, db.Pool, name, set, fence.Control{Pool: c.control.Pool, Store: store}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cdc.CreatePublication(ctx, src.Pool, names.Publication, set, []ring.Range{rg}); err != nil {
		t.Fatal(err)
	}
	rc, err := pgconn.Connect(ctx, src.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(ctx)
	if _, _, err := cdc.CreateSlot(ctx, rc, names.Slot); err != nil {
		t.Fatal(err)
	}
	if _, err := backfill.Copy(ctx, src.Pool, dst.Pool, backfill.Options{Move: move, Set: set, Ranges: []ring.Range{rg}, ChunkRows: 500}); err != nil {
		t.Fatal(err)
	}
	if n := countIn(t, dst, rg); n == 0 {
		t.Fatal("nothing copied: the test's range holds no user")
	}
	return rg
}

func countIn(t *testing.T, db *pgtest.DB, rg ring.Range) int64 {
	return db.QueryInt64(t, "SELECT count(*) FROM users WHERE "+ring.Predicate("hashint8extended(id, 0)", []ring.Range{rg}))
}

// TestRecoverAfterEveryEnding: a migration left behind by its workflow is
// not reported while the workflow runs, and recover refuses to touch it;
// once the workflow is terminated, topology check reports the migration
// and its slot and publication with the fix (exit 1), recover rolls it
// back, and the check is clean again. A migration whose history is lost
// (no workflow) likewise. On 6e755b7 the check said every shard was ok and
// no verb could clean up.
func TestRecoverAfterEveryEnding(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	ctx := context.Background()
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 3000)
	if out, code := c.run(t, "init", "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("init --table: exit %d\n%s", code, out)
	}
	rg := leaveBehind(t, c, "term")
	// Its workflow "runs" (no worker picks it up in this test).
	if _, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.MigrationWorkflowID("term"), TaskQueue: workflows.TaskQueue},
		workflows.MigrationWorkflow, workflows.MigrationRequest{ID: "term", Kind: workflows.KindMove}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.tc.TerminateWorkflow(context.Background(), workflows.MigrationWorkflowID("term"), "", "test ends")
	})
	if out, code := c.run(t, "topology", "check"); code != 0 || strings.Contains(out, "left behind") {
		t.Fatalf("check while the migration's workflow runs: exit %d\n%s", code, out)
	}
	out, code := c.run(t, "recover", "term")
	if code != 3 || !strings.Contains(out, "is running") || !strings.Contains(out, "reshard rollback term") {
		t.Fatalf("recover of a running migration: exit %d\n%s", code, out)
	}
	if c.slots(t) != 1 {
		t.Fatal("the refused recover changed something")
	}

	if err := c.tc.TerminateWorkflow(ctx, workflows.MigrationWorkflowID("term"), "", "operator"); err != nil {
		t.Fatal(err)
	}
	out, code = c.run(t, "topology", "check")
	for _, want := range []string{
		"migration term: its workflow has ended (terminated", "1 move(s) not ended and 1 range(s) migrating; fix: reshard recover term",
		"left behind: slot reshard_term_m1 (inactive, retaining WAL) of move term_m1 of migration term",
		"left behind: publication reshard_term_m1", "1 migration(s) ended with work left",
	} {
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("check after the workflow was terminated: exit %d, want %q in\n%s", code, want, out)
		}
	}
	// The verbs that need a workflow say which one does not.
	if out, code := c.run(t, "rollback", "term", "--timeout", "5s"); code == 0 || !strings.Contains(out, "reshard recover term") {
		t.Fatalf("rollback of a terminated migration: exit %d, want the recover named\n%s", code, out)
	}
	out, code = c.run(t, "recover", "term")
	if code != 0 || !strings.Contains(out, "move term_m1 (shard1 → shard2): rolled back") || !strings.Contains(out, "migration term: ended") {
		t.Fatalf("recover: exit %d\n%s", code, out)
	}
	if n := c.slots(t); n != 0 {
		t.Fatalf("%d slots left after recover", n)
	}
	if n := countIn(t, c.shards["shard2"], rg); n != 0 {
		t.Fatalf("%d copied users left on the target", n)
	}
	if out, code := c.run(t, "topology", "check"); code != 0 || strings.Contains(out, "left behind") || strings.Contains(out, "drift") {
		t.Fatalf("check after recover: exit %d\n%s", code, out)
	}
	if out, code := c.run(t, "recover", "term"); code != 0 || !strings.Contains(out, "already ended (rolled_back)") || !strings.Contains(out, "nothing left to recover") {
		t.Fatalf("recover again: exit %d\n%s", code, out)
	}

	// History lost: no workflow at all.
	leaveBehind(t, c, "lost")
	out, code = c.run(t, "topology", "check")
	if code != 1 || !strings.Contains(out, "migration lost: its workflow has ended (not found: its history is lost)") {
		t.Fatalf("check of a migration without history: exit %d\n%s", code, out)
	}
	if out, code := c.run(t, "recover", "lost"); code != 0 || !strings.Contains(out, "rolled back") {
		t.Fatalf("recover of a migration without history: exit %d\n%s", code, out)
	}
	if out, code := c.run(t, "topology", "check"); code != 0 {
		t.Fatalf("check after recover: exit %d\n%s", code, out)
	}
	if out, code := c.run(t, "recover", "nosuch"); code != 2 || !strings.Contains(out, "no migration nosuch") {
		t.Fatalf("recover of an unknown migration: exit %d\n%s", code, out)
	}
}
