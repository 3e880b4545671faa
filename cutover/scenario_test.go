package cutover_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cleanup"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/testkit/movetest"
)

// TestFullMoveUnderWritesLosesNothing: slot → copy → CDC → cutover → GRACE →
// cleanup, with writers going through a router the whole time; every key
// ends with its last acknowledged write on its owner, and during GRACE the
// old owner has every write too.
func TestFullMoveUnderWritesLosesNothing(t *testing.T) {
	e := movetest.New(t, "full", 1200)
	r := e.Router(t, true)
	stop := e.Writers(t, r, 1)
	time.Sleep(300 * time.Millisecond)
	res := e.ToGrace(t)
	t.Logf("write pause %s, steps %v", res.WritePause, res.Steps)
	time.Sleep(time.Second) // writes on the new owner during GRACE
	st := stop()
	if st.Failed.Load() != 0 {
		t.Fatalf("%d writes failed (last: %v)", st.Failed.Load(), *st.LastErr.Load())
	}
	if st.Acked.Load() < 500 {
		t.Fatalf("only %d acknowledged writes", st.Acked.Load())
	}
	if r.Version() != res.Version {
		t.Fatalf("router on v%d, cutover published v%d", r.Version(), res.Version)
	}
	e.CheckLedger(t)
	movetest.Drain(t, e.DBs["b"], e.Rev)
	moving := func(k int64) string { // the old owner has every write of the moved range
		if ring.ContainsAny(e.Move.Ranges, ring.TokenInt64(k)) {
			return "a"
		}
		return ""
	}
	e.CheckOn(t, moving)

	// CLEANUP, with writers running again.
	stop2 := e.Writers(t, r, 2)
	time.Sleep(200 * time.Millisecond)
	e.StopReverse(t)
	ctx := movetest.Ctx(t)
	cres, err := cleanup.Run(ctx, e.Move, cleanup.Options{Fences: e.Fences, Target: e.New, BatchRows: 100, RowsPerSec: 100000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cleanup.Run(ctx, e.Move, cleanup.Options{Fences: e.Fences, Target: e.New}); err != nil {
		t.Fatalf("cleanup again: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if st := stop2(); st.Failed.Load() != 0 {
		t.Fatalf("%d writes failed during cleanup (last: %v)", st.Failed.Load(), *st.LastErr.Load())
	}
	e.CheckLedger(t)
	if cres.Deleted == 0 {
		t.Error("cleanup deleted nothing on the old owner")
	}
	for _, tb := range []string{"kv", "items"} {
		if n := e.CountIn(t, "a", tb, e.Move.Ranges); n != 0 {
			t.Errorf("%d rows of %s in the moved ranges left on the old owner", n, tb)
		}
	}
	cur, _ := e.Store.Current(ctx)
	if len(cur.Migrating()) != 0 || !slices.Equal(cur.Ring.VNodes(), e.New.VNodes()) {
		t.Errorf("after cleanup: migrating %v, ring %v; want stable and the target ring", cur.Migrating(), cur.Ring)
	}
	for _, s := range []string{"a", "b"} {
		if n := e.DBs[s].QueryInt64(t, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"); n != 0 {
			t.Errorf("%d slots left on %s", n, s)
		}
		if n := e.DBs[s].QueryInt64(t, "SELECT count(*) FROM pg_publication"); n != 0 {
			t.Errorf("%d publications left on %s", n, s)
		}
		if n := e.DBs[s].QueryInt64(t, "SELECT count(*) FROM reshard.fence WHERE guard"); n != 0 { // installed once, turned off
			t.Errorf("TRUNCATE guard left on %s", s)
		}
	}
	if n := e.DBs["b"].QueryInt64(t, "SELECT count(*) FROM reshard.copy_checkpoint"); n != 0 {
		t.Errorf("%d copy checkpoints left", n)
	}
	// Each shard is fenced exactly where the target ring gives it nothing:
	// the old owner keeps its fence on the range it gave away; no guard is
	// left with no move running.
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.New.Ranges("b"), "b": e.New.Ranges("a")})
}

// TestStaleRouterRetriesOnNewOwner: a router that missed the cutover's
// version writes to the old owner, gets the fence error, refreshes, and its
// retried write lands on the new owner.
func TestStaleRouterRetriesOnNewOwner(t *testing.T) {
	e := movetest.New(t, "stale", 300)
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	stale := e.Router(t, false)
	held := stale.Version()
	res, err := e.Cutover(t, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if stale.Version() != held {
		t.Fatal("the stale router moved by itself")
	}
	k := e.MovingKeys[0]
	var tried []*pgxpool.Pool
	var errs []error
	err = stale.Do(movetest.Ctx(t), k, func(ctx context.Context, p *pgxpool.Pool) error {
		tried = append(tried, p)
		_, err := p.Exec(ctx, "UPDATE kv SET v = 'after-cutover' WHERE k = $1", k)
		errs = append(errs, err)
		return err
	})
	if err != nil {
		t.Fatalf("stale write: %v", err)
	}
	if len(tried) != 2 || tried[0] != e.Pools["a"] || tried[1] != e.Pools["b"] || !router.IsFenceError(errs[0]) {
		t.Fatalf("tries on %d pools (first err %v); want the old owner refusing with the fence error, then the new owner", len(tried), errs)
	}
	if stale.Version() != res.Version {
		t.Fatalf("stale router on v%d after the fence error, want v%d", stale.Version(), res.Version)
	}
	e.Ledger.Ack(k, ledger.Value{V: "after-cutover"})
	e.CheckLedger(t)
	if got, _ := ledger.Read(movetest.Ctx(t), e.Move.Source, movetest.KV, []int64{k}); got[k].V == "after-cutover" {
		t.Fatal("the fenced write reached the old owner")
	}
}

// TestRepeatableReadOpenedBeforeFence: a REPEATABLE READ transaction whose
// snapshot predates the fence. If it only read the table before the fence,
// its write after the fence is refused (it takes a new lock, processes the
// fence's invalidation and runs the fence function compiled by the fence).
// If it wrote the table before the fence, it may pass the trigger after it
// (its prepared statement runs the function it compiled before, see
// fenceFunctionSQL): the cutover either waits for it and captures its
// write, or, over budget, aborts; then the write lands on the old owner,
// which still owns the range, and a retried cutover carries it over. Never
// lost.
func TestRepeatableReadOpenedBeforeFence(t *testing.T) {
	e := movetest.New(t, "rr", 300)
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	ctx := movetest.Ctx(t)
	k1, k2, k3 := e.MovingKeys[0], e.MovingKeys[1], e.MovingKeys[2]

	// openRR opens the transaction and takes its snapshot now; with
	// before > 0 it also writes key before (acknowledged at commit).
	openRR := func(before int64) (write func(k int64, v string) error, commit func() error) {
		c := e.DBs["a"].Conn(t)
		if _, err := c.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := c.QueryRow(ctx, "SELECT count(*) FROM kv").Scan(&n); err != nil {
			t.Fatal(err)
		}
		write = func(k int64, v string) error {
			_, err := c.Exec(ctx, "UPDATE kv SET v = $2 WHERE k = $1", k, v)
			return err
		}
		if before > 0 {
			if err := write(before, "rr-before-fence"); err != nil {
				t.Fatal(err)
			}
		}
		return write, func() error {
			_, err := c.Exec(ctx, "COMMIT")
			return err
		}
	}
	waitFenced := func() {
		for {
			f, _, err := fence.Fenced(ctx, e.Move.Source, e.Set.Tables[0])
			if err != nil {
				t.Error(err)
				return
			}
			if ring.ContainsAny(f, e.Move.Ranges[0].Hi) {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	// 1. Over budget: aborted, the write stays on the old owner. A
	// transaction that only read before the fence is refused meanwhile.
	readOnly, rollbackReadOnly := openRR(0)
	write, commit := openRR(k1)
	cut := make(chan error, 1)
	go func() {
		_, err := cutover.Run(ctx, e.CutoverActions(t), e.Journal(), cutover.Options{Budget: 400 * time.Millisecond})
		cut <- err
	}()
	waitFenced()
	if err := readOnly(k3, "rr-read-only"); !router.IsFenceError(err) {
		t.Fatalf("write after the fence of a transaction that only read before it: %v; want the fence error", err)
	}
	if err := rollbackReadOnly(); err != nil { // COMMIT of a failed transaction rolls back
		t.Fatal(err)
	}
	if err := write(k1, "rr-over-budget"); err != nil {
		t.Fatalf("write after the fence of a transaction that wrote before it: %v", err)
	}
	err := <-cut
	var ob *fence.OverBudgetError
	if !errors.Is(err, cutover.ErrAborted) || !errors.As(err, &ob) {
		t.Fatalf("cutover with a transaction open past the budget: %v; want an abort over budget", err)
	}
	if err := commit(); err != nil {
		t.Fatalf("commit after the abort: %v", err)
	}
	e.Ledger.Ack(k1, ledger.Value{V: "rr-over-budget"})
	e.CheckLedger(t) // a still owns the range

	// 2. Within budget: waited for, its write captured.
	write, commit = openRR(k2)
	go func() {
		_, err := cutover.Run(ctx, e.CutoverActions(t), e.Journal(), cutover.Options{Budget: 5 * time.Second})
		cut <- err
	}()
	waitFenced()
	if err := write(k2, "rr-waited"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-cut:
		t.Fatalf("cutover finished while a transaction that passed the fence was open: %v", err)
	default:
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-cut; err != nil {
		t.Fatalf("cutover: %v", err)
	}
	e.Ledger.Ack(k2, ledger.Value{V: "rr-waited"})
	e.CheckLedger(t) // now on b: both writes carried over
	if cur, _ := e.Store.Current(ctx); cur.Ring.Owner(ring.TokenInt64(k2)) != "b" {
		t.Fatal("range not cut over")
	}
}
