package rollback_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cleanup"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/topology"
)

// keyIn returns a key of kv whose token lies in rs.
func keyIn(t *testing.T, e *movetest.Env, rs []ring.Range) int64 {
	t.Helper()
	for _, k := range e.Keys {
		if ring.ContainsAny(rs, ring.TokenInt64(k)) {
			return k
		}
	}
	t.Fatalf("no key in %v", rs)
	return 0
}

// TestRollbackKeepsTheFencesOfAFormerOwner: a range moves a → b and is
// cleaned up (a is fenced on it); a second migration moves it back b → a
// and is rolled back before its cutover. The rollback must leave a fenced
// on the range b owns: a stale router's write there would be acknowledged
// on a shard that does not own the key. (Before the fences were derived
// from the topology, the rollback unfenced its target, "which never owned
// the ranges", and a accepted the write.)
func TestRollbackKeepsTheFencesOfAFormerOwner(t *testing.T) {
	e := movetest.New(t, "fwd", 400)
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	if _, err := e.Cutover(t, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	e.StopForward(t)
	ctx := movetest.Ctx(t)
	if _, err := cleanup.Run(ctx, e.Move, cleanup.Options{Fences: e.Fences, Target: e.New}); err != nil {
		t.Fatal(err)
	}
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.New.Ranges("b"), "b": e.New.Ranges("a")})

	// The way back: b → a, rolled back before its cutover.
	back := cutover.Move{ID: "back", From: "b", To: "a", Source: e.Pools["b"], Target: e.Pools["a"], Set: e.Set, Ranges: e.Move.Ranges}
	if _, err := topology.Begin(e.Old, back.Ranges, "b", "a", "begin move back").Publish(ctx, e.Store); err != nil {
		t.Fatal(err)
	}
	if err := cleanup.ReconcileBoth(ctx, back, e.Fences); err != nil {
		t.Fatal(err)
	}
	if _, err := backfill.Copy(ctx, back.Source, back.Target, backfill.Options{Move: back.ID, Set: e.Set, Ranges: back.Ranges, ChunkRows: 100}); err != nil {
		t.Fatal(err)
	}
	o := options(e)
	o.Old = e.New // the second migration's pre-migration ring
	if err := rollback.BeforeCutover(ctx, back, o); err != nil {
		t.Fatal(err)
	}
	k := keyIn(t, e, e.Move.Ranges)
	if _, err := e.Pools["a"].Exec(ctx, "INSERT INTO kv VALUES ($1, 'stale router')", k); !router.IsFenceError(err) {
		t.Fatalf("an insert of key %d (owned by b) on a after the rollback: %v; want the fence error", k, err)
	}
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.New.Ranges("b"), "b": e.New.Ranges("a")})
	if n := e.CountIn(t, "a", "kv", e.Move.Ranges); n != 0 {
		t.Errorf("%d rows of the range left on a by the rolled-back copy", n)
	}
}

// TestGuardsStayWhileAnotherMoveUsesTheShard: two moves of one migration
// share their shards; rolling back the first must keep the TRUNCATE guards
// that the second still needs (its slot is on a, its rows go to b); rolling
// back the second lifts them. (Before, the first move's end dropped the
// guards, and TRUNCATE — replicated without row filters — was accepted on
// a shard with a live slot.)
func TestGuardsStayWhileAnotherMoveUsesTheShard(t *testing.T) {
	e := movetest.New(t, "one", 200)
	ctx := movetest.Ctx(t)
	other := ring.Range{Lo: 6e18, Hi: 7e18} // in a's wrap range
	target2, moves, err := ring.PlanMove(e.New, other, "b")
	if err != nil || len(moves) != 1 || moves[0].From != "a" {
		t.Fatalf("plan: %v %v", moves, err)
	}
	e.Begin(t)
	second := cutover.Move{ID: "two", From: "a", To: "b", Source: e.Pools["a"], Target: e.Pools["b"], Set: e.Set, Ranges: []ring.Range{other}}
	if _, err := topology.Begin(target2, second.Ranges, "a", "b", "begin move two").Publish(ctx, e.Store); err != nil {
		t.Fatal(err)
	}
	if err := cleanup.ReconcileBoth(ctx, second, e.Fences); err != nil {
		t.Fatal(err)
	}
	if err := rollback.BeforeCutover(ctx, e.Move, options(e)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		_, err := e.Pools[s].Exec(ctx, "TRUNCATE items")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != fence.TruncateSQLState {
			t.Errorf("TRUNCATE on %s while move two still uses it: %v; want it refused", s, err)
		}
	}
	if err := rollback.BeforeCutover(ctx, second, options(e)); err != nil {
		t.Fatal(err)
	}
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.Old.Ranges("b"), "b": e.Old.Ranges("a")})
}
