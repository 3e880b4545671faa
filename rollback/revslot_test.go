package rollback_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/verify"
)

// TestRepairAfterReverseSlotIsNotSentBack: a cutover attempt made the
// reverse slot and did not publish; the source then failed over, and the
// recovery repaired the target (verify.Repair: the source's value of that
// moment, written with no replication origin); the forward stream then
// applied a newer source value to the same row (with its origin). The next
// attempt makes the reverse slot again (join.RecreateReverse), so GRACE's
// reverse stream starts after the repair: the old owner keeps the newer
// value. With the first attempt's slot kept (join.Reverse returns its
// position), the reverse stream replays the repair's row over the newer
// one, and a rollback in GRACE would serve that stale row.
func TestRepairAfterReverseSlotIsNotSentBack(t *testing.T) {
	e := movetest.New(t, "revslot", 200)
	ctx := movetest.Ctx(t)
	k := e.MovingKeys[0]
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)

	// Attempt 1 prepares the reverse slot, then does not publish.
	if _, _, err := join.Reverse(ctx, e.Move, e.DBs["b"].ReplicationDSN()); err != nil {
		t.Fatal(err)
	}

	// The recovery: the stream stopped, a change the target missed (as one
	// lost with the failed-over primary's slot), the repair.
	e.StopForward(t)
	err := pgx.BeginFunc(ctx, e.Super["b"].Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil { // past the target's fence
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE kv SET v = 'missed' WHERE k = $1", k)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Repair(ctx, e.Move.Source, e.Move.Target, verify.Options{Set: e.SrcSet, Ranges: e.Move.Ranges, ChunkRows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RowsCopied != 1 {
		t.Fatalf("repair copied %d rows, want the 1 that differs", rep.RowsCopied)
	}

	// The stream again; the application changes the row on the source.
	e.StartForward(t)
	e.Pools["a"].Exec(ctx, "UPDATE kv SET v = 'newer' WHERE k = $1", k)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	if v := value(t, e, "b", k); v != "newer" {
		t.Fatalf("target's key %d is %q after the forward stream, want \"newer\"", k, v)
	}

	// Attempt 2: a repair ran since the reverse slot was made.
	if _, e.RevL0, err = join.RecreateReverse(ctx, e.Move, e.DBs["b"].ReplicationDSN()); err != nil {
		t.Fatal(err)
	}
	if _, err := cutover.Run(ctx, e.CutoverActions(t), e.Journal(), cutover.Options{Budget: 2 * time.Second}); err != nil {
		t.Fatalf("cutover: %v", err)
	}
	e.StopForward(t)
	e.StartReverse(t)
	movetest.Drain(t, e.DBs["b"], e.Rev)
	if v := value(t, e, "a", k); v != "newer" {
		t.Fatalf("old owner's key %d is %q after GRACE's reverse stream, want \"newer\" (the target's): the repair's write was sent back", k, v)
	}
	e.StopReverse(t)
}

func value(t *testing.T, e *movetest.Env, shard string, k int64) string {
	t.Helper()
	var v string
	if err := e.Super[shard].Pool.QueryRow(movetest.Ctx(t), "SELECT v FROM kv WHERE k = $1", k).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
