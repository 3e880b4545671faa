package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

// TestCheckPlacement: a row on a shard that does not own it is reported
// with its table, count and key, and the exit code is 1; while a move that
// touches it has not ended (reshard.moves) it is not misplaced, and once the
// move is recorded as ended it is again.
func TestCheckPlacement(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	ctx := context.Background()
	c := newTestCluster(t, false)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 300)
	if out, code := c.run(t, "init", "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("init --table: exit %d\n%s", code, out)
	}
	out, code := c.run(t, "check", "placement")
	if code != 0 || !strings.Contains(out, "shard1     ok: every row on its owner") || !strings.Contains(out, "shard2     ok") {
		t.Fatalf("check placement, every row on its owner: exit %d\n%s", code, out)
	}
	// A faulty load puts a user on shard1, which does not own it (the fence
	// refuses the application; a replica-role session passes it).
	k := notOwnedBy(t, c, "shard1")
	if err := pgx.BeginFunc(ctx, c.shards["shard1"].Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO users VALUES ($1, 'stray')`, k)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := "shard1     misplaced: 1 row(s) of public.users (keys " + strconv.FormatInt(k, 10) + ")"
	out, code = c.run(t, "check", "placement")
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("check placement with a stray user: exit %d, want 1 and %q\n%s", code, want, out)
	}

	// A move of that key's range from shard2 to shard1 that has not ended:
	// both shards may hold its rows.
	store := topology.NewStore(c.control.Pool)
	cur, err := store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rng := cur.State(ring.TokenInt64(k)).Range
	if err := store.SavePlan(ctx, topology.Plan{MigrationID: "mv1", FromVersion: cur.Version, Before: cur.Ring, After: cur.Ring,
		Moves: []ring.Move{{Range: rng, From: "shard2", To: "shard1"}}}); err != nil {
		t.Fatal(err)
	}
	next, err := topology.New(cur.Ring, nil, "test: migration mv1 runs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Publish(ctx, cur.Version, next.WithMigrationID("mv1")); err != nil {
		t.Fatal(err)
	}
	out, code = c.run(t, "check", "placement")
	if code != 0 || !strings.Contains(out, "1 move(s) not ended") {
		t.Fatalf("check placement during the move: exit %d\n%s", code, out)
	}
	if err := store.RecordMoveEnd(ctx, topology.MoveEnd{MigrationID: "mv1", MoveID: "mv1-1", From: "shard2", To: "shard1",
		Ranges: []ring.Range{rng}, Outcome: topology.MoveRolledBack}); err != nil {
		t.Fatal(err)
	}
	out, code = c.run(t, "check", "placement", "--json")
	if code != 1 || !strings.Contains(out, `"rows": 1`) || !strings.Contains(out, strconv.FormatInt(k, 10)) {
		t.Fatalf("check placement --json after the move ended: exit %d\n%s", code, out)
	}
	// Bad input changes nothing and says what is wrong.
	if out, code := c.run(t, "check", "placement", "--keyspace", "nope"); code != 2 {
		t.Fatalf("check placement --keyspace nope: exit %d\n%s", code, out)
	}
}
