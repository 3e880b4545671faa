package main

import (
	"context"
	"strings"
	"testing"

	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// TestTopologyCheckSaysInTransition: a shard whose fences differ from the
// topology while a cutover of one of its moves is midway (its journal says
// so) is in transition, exit 0 (a check right after rollback reported the
// reverse cutover fencing shard5 as drift, exit 1); once the journal says
// the cutover is done, the same difference is drift again, exit 1, and
// --repair did not touch it meanwhile.
func TestTopologyCheckSaysInTransition(t *testing.T) {
	c := newEmptyCluster(t, `CREATE TABLE users (id bigint PRIMARY KEY)`)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2", "--vnodes", "1", "--table", "users:id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	ctx := context.Background()
	store := topology.NewStore(c.control.Pool)
	k, err := store.ResolveKeyspace(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	store = store.In(k.Name)
	cur, err := store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r ring.Range
	for _, or := range cur.Ring.AllRanges() {
		if or.Shard == "shard1" {
			r = or.Range
			break
		}
	}
	const id = "trans"
	plan := topology.Plan{MigrationID: id, FromVersion: cur.Version, Before: cur.Ring, After: cur.Ring, Moves: []ring.Move{{Range: r, From: "shard1", To: "shard2"}}}
	if err := store.SavePlan(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.StartMigration(ctx, store, id, "move", cur.Version, cur.Ring, cur.Ring,
		[]topology.MoveRanges{{Source: "shard1", Target: "shard2", Ranges: []ring.Range{r}}}, nil); err != nil {
		t.Fatal(err)
	}
	// The cutover fenced its source (hold, reconcile); the check reads the
	// topology and holds a moment later, when the hold is gone.
	ctl := fence.Control{Pool: c.control.Pool, Store: store}
	if err := topology.Migrate(ctx, c.control.Pool); err != nil {
		t.Fatal(err)
	}
	set, err := tableset.Introspect(ctx, c.shards["shard1"].Pool, k.Spec(), "shard1")
	if err != nil {
		t.Fatal(err)
	}
	move := plan.PlannedMoves()[0].ID
	if err := ctl.Hold(ctx, "shard1", cutover.HoldName(move), 1, []ring.Range{r}); err != nil {
		t.Fatal(err)
	}
	if _, err := fence.Reconcile(ctx, c.shards["shard1"].Pool, "shard1", set, ctl); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Release(ctx, "shard1", cutover.HoldName(move), 1); err != nil {
		t.Fatal(err)
	}
	if err := topology.Migrate(ctx, c.control.Pool); err != nil {
		t.Fatal(err)
	}
	j := cutover.PGJournal{Pool: c.control.Pool, Move: move}
	for _, s := range []cutover.Step{cutover.StepGates, cutover.StepFenceSource, cutover.StepPublish} {
		if err := j.Record(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
	}
	out, code := c.run(t, "topology", "check", "--repair")
	if code != 0 || !strings.Contains(out, "shard1     in transition: the cutover of move "+move+" (shard1 → shard2), at step publish") ||
		strings.Contains(out, "drift:") || strings.Contains(out, "repaired") {
		t.Errorf("check while the cutover is midway: exit %d, want 0 and in transition, nothing repaired\n%s", code, out)
	}
	if err := j.Record(ctx, cutover.StepDone, ""); err != nil {
		t.Fatal(err)
	}
	out, code = c.run(t, "topology", "check")
	if code != 1 || !strings.Contains(out, "shard1     drift: ") || strings.Contains(out, "in transition") {
		t.Errorf("check once the cutover is done: exit %d, want 1 and drift\n%s", code, out)
	}
}
