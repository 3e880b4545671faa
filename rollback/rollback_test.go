package rollback_test

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func options(e *movetest.Env) rollback.Options {
	return rollback.Options{Store: e.Store, Control: e.Ctl.Pool, Old: e.Old, BatchRows: 100, RowsPerSec: 100000}
}

// leftovers fails the test if a slot, publication, origin, TRUNCATE guard or
// copy checkpoint of the move is left on either shard.
func leftovers(t *testing.T, e *movetest.Env) {
	t.Helper()
	for _, s := range []string{"a", "b"} {
		db := e.DBs[s]
		for what, q := range map[string]string{
			"slots":           "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
			"publications":    "SELECT count(*) FROM pg_publication",
			"origins":         "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'reshard%" + e.Move.ID + "'",
			"TRUNCATE guards": "SELECT count(*) FROM reshard.fence WHERE guard", // installed once, turned off
		} {
			if n := db.QueryInt64(t, q); n != 0 {
				t.Errorf("%d %s left on %s", n, what, s)
			}
		}
	}
	if n := e.DBs["b"].QueryInt64(t, "SELECT count(*) FROM reshard.copy_checkpoint"); n != 0 {
		t.Errorf("%d copy checkpoints left", n)
	}
}

// TestDuringGrace: writes land on the new owner during GRACE, then the move
// is rolled back while writers keep going: the old owner ends with every
// acknowledged write, the new owner without the rows, the topology as it was.
func TestDuringGrace(t *testing.T) { testDuringGrace(t, movetest.New(t, "grace", 1000)) }

// TestDuringGraceAsLeastPrivilegedRole is TestDuringGrace with the move,
// its cutover, GRACE's reverse stream and the rollback run as a role
// without superuser (deploy/reshard-role.sql), the writers as the tables'
// owner.
func TestDuringGraceAsLeastPrivilegedRole(t *testing.T) {
	testDuringGrace(t, movetest.New(t, "grace_lp", 1000, movetest.LeastPrivileged()))
}

func testDuringGrace(t *testing.T, e *movetest.Env) {
	r := e.Router(t, true)
	stop := e.Writers(t, r, 3)
	time.Sleep(300 * time.Millisecond)
	e.ToGrace(t)
	time.Sleep(time.Second) // writes on the new owner
	e.StopReverse(t)        // the GRACE reader; the rollback runs its own
	ctx := movetest.Ctx(t)
	res, err := rollback.DuringGrace(ctx, e.Move, e.ReverseOptions(t), options(e))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reverse write pause %s, steps %v", res.WritePause, res.Steps)
	time.Sleep(300 * time.Millisecond) // writes on the old owner again
	st := stop()
	if st.Failed.Load() != 0 {
		t.Fatalf("%d writes failed (last: %v)", st.Failed.Load(), *st.LastErr.Load())
	}
	if r.Version() != res.Version {
		t.Fatalf("router on v%d, rollback published v%d", r.Version(), res.Version)
	}
	e.CheckLedger(t)
	cur, _ := e.Store.Current(ctx)
	for _, k := range e.MovingKeys {
		if cur.Ring.Owner(ring.TokenInt64(k)) != "a" {
			t.Fatalf("key %d not back on a", k)
		}
	}
	if len(cur.Migrating()) != 0 || !slices.Equal(cur.Ring.VNodes(), e.Old.VNodes()) {
		t.Errorf("topology after rollback: migrating %v, ring %v; want the pre-migration ring", cur.Migrating(), cur.Ring)
	}
	for _, tb := range []string{"kv", "items"} {
		if n := e.CountIn(t, "b", tb, e.Move.Ranges); n != 0 {
			t.Errorf("%d rows of %s left on the new owner", n, tb)
		}
	}
	leftovers(t, e)
	// Each shard is fenced exactly where the pre-migration ring gives it
	// nothing: the old owner serves the range unfenced, the new owner keeps
	// its fence on it.
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.Old.Ranges("b"), "b": e.Old.Ranges("a")})
	// Idempotent.
	if _, err := rollback.DuringGrace(ctx, e.Move, e.ReverseOptions(t), options(e)); err != nil {
		t.Fatalf("rollback again: %v", err)
	}
	if err := rollback.BeforeCutover(ctx, e.Move, options(e)); err != nil {
		t.Fatalf("rollback before cutover of a rolled-back move: %v", err)
	}
	e.CheckLedger(t)
}

// TestBeforeCutover: a move copied and streaming under writes is rolled
// back: the source has every write and nothing of the move, the target has
// none of the rows and its own rows untouched, the topology is the
// pre-migration one.
func TestBeforeCutover(t *testing.T) { testBeforeCutover(t, movetest.New(t, "before", 1000)) }

// TestBeforeCutoverAsLeastPrivilegedRole is TestBeforeCutover as a role
// without superuser (deploy/reshard-role.sql), the writers as the tables'
// owner.
func TestBeforeCutoverAsLeastPrivilegedRole(t *testing.T) {
	testBeforeCutover(t, movetest.New(t, "before_lp", 1000, movetest.LeastPrivileged()))
}

func testBeforeCutover(t *testing.T, e *movetest.Env) {
	r := e.Router(t, true)
	stop := e.Writers(t, r, 4)
	bOwn := e.DBs["b"].QueryInt64(t, "SELECT count(*) FROM items")
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	if n := e.CountIn(t, "b", "kv", e.Move.Ranges); n == 0 {
		t.Fatal("nothing copied")
	}
	time.Sleep(300 * time.Millisecond)
	e.StopForward(t)
	ctx := movetest.Ctx(t)
	if _, err := rollback.DuringGrace(ctx, e.Move, e.ForwardOptions(), options(e)); !errors.Is(err, rollback.ErrNotCutOver) {
		t.Fatalf("DuringGrace of a move not cut over: %v", err)
	}
	// The deletes go through the throttle given (the activity's adaptive
	// one), one Wait per batch of rows.
	copied := e.CountIn(t, "b", "kv", e.Move.Ranges) + e.CountIn(t, "b", "items", e.Move.Ranges)
	o := options(e)
	o.Throttle = backfill.NewThrottle(100000, 0)
	if err := rollback.BeforeCutover(ctx, e.Move, o); err != nil {
		t.Fatal(err)
	}
	if passed := o.Throttle.Passed(); passed < copied {
		t.Errorf("the throttle let %d rows through, the rollback deleted %d", passed, copied)
	}
	if err := rollback.BeforeCutover(ctx, e.Move, options(e)); err != nil {
		t.Fatalf("again: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if st := stop(); st.Failed.Load() != 0 {
		t.Fatalf("%d writes failed (last: %v)", st.Failed.Load(), *st.LastErr.Load())
	}
	e.CheckLedger(t)
	cur, _ := e.Store.Current(ctx)
	if len(cur.Migrating()) != 0 || !slices.Equal(cur.Ring.VNodes(), e.Initial.Ring.VNodes()) {
		t.Errorf("topology after rollback: migrating %v, ring %v; want version 1's", cur.Migrating(), cur.Ring)
	}
	for _, tb := range []string{"kv", "items"} {
		if n := e.CountIn(t, "b", tb, e.Move.Ranges); n != 0 {
			t.Errorf("%d rows of %s left on the target", n, tb)
		}
	}
	if n := e.DBs["b"].QueryInt64(t, "SELECT count(*) FROM items"); n != bOwn {
		t.Errorf("the target's own items: %d, were %d", n, bOwn)
	}
	leftovers(t, e)
	// Each shard fenced exactly where the pre-migration ring gives it
	// nothing: the target keeps its fence on the ranges it never got.
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.Old.Ranges("b"), "b": e.Old.Ranges("a")})
}
