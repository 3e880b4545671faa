package rollback_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/topology"
)

// A migration whose workflow ended without finishing (terminated, reset,
// failed after its retries, its history lost) leaves its ranges migrating,
// its slot retaining WAL, its guards on. Recover, working from the control
// database alone, brings the cluster back: on 6e755b7 nothing could (the
// rollback Update needs a running workflow).

const recoverMigration = "rec"

func recoverOptions(e *movetest.Env) rollback.RecoverOptions {
	return rollback.RecoverOptions{Store: e.Store, Control: e.Ctl.Pool, BatchRows: 100,
		Tables: tableset.Spec{Name: "app", Tables: []tableset.TableSpec{{Table: "kv", KeyColumn: "k"}, {Table: "items", KeyColumn: "k"}}},
		Shards: func(_ context.Context, name string) (*pgxpool.Pool, error) {
			if db, ok := e.DBs[name]; ok {
				return db.Pool, nil
			}
			return nil, errors.New("no such shard")
		}}
}

// movesState is the state reshard.moves gives the migration's only move.
func movesState(t *testing.T, e *movetest.Env) string {
	t.Helper()
	var st string
	if err := e.Ctl.Pool.QueryRow(movetest.Ctx(t), `SELECT state FROM reshard.moves WHERE migration_id = $1`, recoverMigration).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// recoverTwice recovers, checks that a second run changes nothing (no
// version published), and returns the first run's report.
func recoverTwice(t *testing.T, e *movetest.Env) rollback.Recovery {
	t.Helper()
	ctx := movetest.Ctx(t)
	rec, err := rollback.Recover(ctx, recoverMigration, recoverOptions(e))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recovery: %+v", rec)
	before, _ := e.Store.Current(ctx)
	again, err := rollback.Recover(ctx, recoverMigration, recoverOptions(e))
	if err != nil {
		t.Fatalf("recover again: %v", err)
	}
	if after, _ := e.Store.Current(ctx); after.Version != before.Version || again.Version != 0 {
		t.Fatalf("a second recovery published v%d (topology v%d → v%d)", again.Version, before.Version, after.Version)
	}
	if len(again.Moves) != 1 || again.Moves[0].Action != "already ended ("+movesState(t, e)+")" {
		t.Fatalf("second recovery: %+v", again)
	}
	return rec
}

// TestRecoverBeforeCutover: the workflow went away in CDC_CATCH_UP (the
// stream stopped with its worker). Recover rolls the move back: the ranges
// stable on the old owner, the copy and the stream gone, no guard, the
// migration's end published, every write on the old owner.
func TestRecoverBeforeCutover(t *testing.T) {
	e := movetest.New(t, topology.MoveID(recoverMigration, 1), 600)
	r := e.Router(t, true)
	stop := e.Writers(t, r, 5)
	e.BeginMigration(t, recoverMigration)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	e.StopForward(t) // terminated: nothing stops or drops anything
	ctx := movetest.Ctx(t)
	if cur, _ := e.Store.Current(ctx); len(cur.Migrating()) == 0 {
		t.Fatal("the test's migration has no range migrating")
	}
	rec := recoverTwice(t, e)
	if len(rec.Moves) != 1 || rec.Moves[0].Action != "rolled back" || rec.Version == 0 {
		t.Fatalf("recovery %+v, want the move rolled back and the end published", rec)
	}
	time.Sleep(200 * time.Millisecond)
	if st := stop(); st.Failed.Load() != 0 {
		t.Fatalf("%d writes failed (last: %v)", st.Failed.Load(), *st.LastErr.Load())
	}
	e.CheckLedger(t)
	cur, _ := e.Store.Current(ctx)
	if len(cur.Migrating()) != 0 || !topology.Owns(cur.Ring, "a", e.Move.Ranges) {
		t.Fatalf("topology v%d after recovery: migrating %v, the range on a: %v", cur.Version, cur.Migrating(), topology.Owns(cur.Ring, "a", e.Move.Ranges))
	}
	if cur.Reason != "migration rec (move) ends" {
		t.Errorf("last version's reason %q, want the migration's end", cur.Reason)
	}
	if got := movesState(t, e); got != string(topology.MoveRolledBack) {
		t.Errorf("reshard.moves says %s", got)
	}
	for _, tb := range []string{"kv", "items"} {
		if n := e.CountIn(t, "b", tb, e.Move.Ranges); n != 0 {
			t.Errorf("%d rows of %s left on the target", n, tb)
		}
	}
	leftovers(t, e)
	e.CheckFences(t, false, map[string][]ring.Range{"a": cur.Ring.Ranges("b"), "b": cur.Ring.Ranges("a")})
}

// TestRecoverCutOver: the workflow went away in GRACE (the reverse stream
// stopped with its worker). The cutover is published, so Recover completes
// the move: the ranges stable on the new owner under the planned ring,
// both streams gone, the old owner's copy deleted, every write on the new
// owner.
func TestRecoverCutOver(t *testing.T) {
	e := movetest.New(t, topology.MoveID(recoverMigration, 1), 600)
	r := e.Router(t, true)
	stop := e.Writers(t, r, 6)
	e.BeginMigration(t, recoverMigration)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	if _, err := e.Cutover(t, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	e.StopForward(t)
	e.StartReverse(t)
	time.Sleep(500 * time.Millisecond) // writes on the new owner
	e.StopReverse(t)                   // terminated in GRACE
	ctx := movetest.Ctx(t)
	rec := recoverTwice(t, e)
	if len(rec.Moves) != 1 || rec.Moves[0].Action != "completed" || rec.Version == 0 {
		t.Fatalf("recovery %+v, want the move completed and the end published", rec)
	}
	time.Sleep(200 * time.Millisecond)
	if st := stop(); st.Failed.Load() != 0 {
		t.Fatalf("%d writes failed (last: %v)", st.Failed.Load(), *st.LastErr.Load())
	}
	e.CheckLedger(t)
	cur, _ := e.Store.Current(ctx)
	if len(cur.Migrating()) != 0 || !slices.Equal(cur.Ring.VNodes(), e.New.VNodes()) {
		t.Fatalf("topology v%d after recovery: migrating %v, ring %v; want the planned ring", cur.Version, cur.Migrating(), cur.Ring)
	}
	if got := movesState(t, e); got != string(topology.MoveCleanedUp) {
		t.Errorf("reshard.moves says %s", got)
	}
	for _, tb := range []string{"kv", "items"} {
		if n := e.CountIn(t, "a", tb, e.Move.Ranges); n != 0 {
			t.Errorf("%d rows of %s left on the old owner", n, tb)
		}
	}
	leftovers(t, e)
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.New.Ranges("b"), "b": e.New.Ranges("a")})
}

// A migration that never published its topology changed nothing: Recover
// says so and changes nothing.
func TestRecoverNeverStarted(t *testing.T) {
	e := movetest.New(t, topology.MoveID(recoverMigration, 1), 10)
	ctx := movetest.Ctx(t)
	rec, err := rollback.Recover(ctx, "nosuch", recoverOptions(e))
	if err != nil || rec.Note == "" || len(rec.Moves) != 0 {
		t.Fatalf("recover of a migration never started: %+v, %v", rec, err)
	}
	if cur, _ := e.Store.Current(ctx); cur.Version != e.Initial.Version {
		t.Fatalf("topology v%d, want v%d unchanged", cur.Version, e.Initial.Version)
	}
}
