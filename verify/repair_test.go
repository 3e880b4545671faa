package verify

import (
	"context"
	"strings"
	"testing"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestRepairMakesTheTargetEqual: rows missing, extra and different on the
// target's moving ranges are repaired (the source is the truth), rows
// outside the moving ranges are left alone, verify then passes, and a second
// repair of the now clean ranges writes nothing.
func TestRepairMakesTheTargetEqual(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersDst)
	src.Exec(t, ordersDDL)
	dst.Exec(t, ordersDDL)
	const n = 30_000
	src.Exec(t, usersFill, 1, n)
	dst.Exec(t, usersFill, 1, n)
	src.Exec(t, ordersFill, 20_000)
	dst.Exec(t, ordersFill, 20_000)
	src.Exec(t, "ANALYZE")
	// The target's moving ranges are fenced: a write that is not the
	// applier's (replica role) fails.
	dst.Exec(t, `CREATE FUNCTION no_writes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'fenced'; END $$`)
	dst.Exec(t, `CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON users FOR EACH ROW EXECUTE FUNCTION no_writes()`)
	dst.Exec(t, `CREATE TRIGGER fence BEFORE INSERT OR UPDATE OR DELETE ON orders FOR EACH ROW EXECUTE FUNCTION no_writes()`)
	dst.Exec(t, `ALTER TABLE users DISABLE TRIGGER fence`)
	dst.Exec(t, `ALTER TABLE orders DISABLE TRIGGER fence`)

	ranges := []ring.Range{{Lo: ring.MinToken, Hi: -3_000_000_000_000_000_000}, {Lo: 0, Hi: 4_000_000_000_000_000_000}}
	// The differences sit in the first 6,000 keys and above n, so the
	// chunks between (about 13,000 moving rows at 4,000 a chunk) are equal
	// however the sampled chunk bounds fall: spread over the whole key
	// space, they made every users chunk differ in some plans.
	var missing, changed []int64
	for _, from := range []int64{1, 1500, 3000, 4500} {
		missing = append(missing, inRange(t, src, ranges, from, n, true))
	}
	changed = append(changed, inRange(t, src, ranges, 2000, n, true), inRange(t, src, ranges, 5500, n, true))
	extra := inRange(t, src, ranges, n+1, 2*n, true)
	for _, id := range missing {
		dst.Exec(t, "DELETE FROM users WHERE id = $1", id)
	}
	for _, id := range changed {
		dst.Exec(t, "UPDATE users SET name = 'changed', balance = -1 WHERE id = $1", id)
	}
	dst.Exec(t, usersFill, extra, extra)
	// Outside the moving ranges: the target's own rows, never touched.
	outsideMissing := inRange(t, src, ranges, 1, n, false)
	outsideExtra := inRange(t, src, ranges, 2*n+1, 3*n, false)
	dst.Exec(t, "DELETE FROM users WHERE id = $1", outsideMissing)
	dst.Exec(t, usersFill, outsideExtra, outsideExtra)
	orderUser := inRange(t, src, ranges, 0, 4999, true)
	dst.Exec(t, "UPDATE orders SET note = 'x''\\y' WHERE user_id = $1", orderUser)
	changedOrders := src.QueryInt64(t, "SELECT count(*) FROM orders WHERE user_id = $1", orderUser)
	dst.Exec(t, `ALTER TABLE users ENABLE TRIGGER fence`)
	dst.Exec(t, `ALTER TABLE orders ENABLE TRIGGER fence`)

	spec := tableset.Spec{Name: "users", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"}}}
	opts := Options{Set: introspect(t, src, spec), Ranges: ranges, ChunkRows: 4000, Parallel: 2}
	rep, err := Repair(ctx, src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("repair: %d chunks, %d repaired, %d rows copied, %d deleted in %v", rep.Chunks, rep.Repaired, rep.RowsCopied, rep.RowsDeleted, rep.Duration)
	wantCopied := int64(len(missing)+len(changed)) + changedOrders
	wantDeleted := int64(len(changed)+1) + changedOrders
	if rep.RowsCopied != wantCopied || rep.RowsDeleted != wantDeleted {
		t.Errorf("copied %d and deleted %d rows, want %d and %d", rep.RowsCopied, rep.RowsDeleted, wantCopied, wantDeleted)
	}
	if rep.Chunks < 4 || rep.Repaired < 2 || rep.Repaired >= rep.Chunks {
		t.Errorf("%d of %d chunks repaired: want only the differing ones, several chunks in all", rep.Repaired, rep.Chunks)
	}
	if rep.Verify.OK() {
		t.Error("the repair's report of what it found says nothing differed")
	}
	after, err := Run(ctx, src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !after.OK() {
		t.Fatalf("verify after the repair: %d mismatches: %+v %+v", after.Mismatches(), after.Tables[0].AllKeys(), after.Tables[1].AllKeys())
	}
	if got := dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1", outsideMissing); got != 0 {
		t.Errorf("a row outside the moving ranges was copied: %d", got)
	}
	if got := dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1", outsideExtra); got != 1 {
		t.Errorf("the target's own row outside the moving ranges was deleted")
	}

	again, err := Repair(ctx, src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.RowsCopied != 0 || again.RowsDeleted != 0 || again.Repaired != 0 {
		t.Errorf("repair of clean ranges: %d chunks repaired, %d rows copied, %d deleted; want none", again.Repaired, again.RowsCopied, again.RowsDeleted)
	}
}

// TestRepairRefusesARunningApplier: a repair while the stream writes the
// target would race it.
func TestRepairRefusesARunningApplier(t *testing.T) {
	_, err := Repair(context.Background(), nil, nil, Options{Holder: &fakeApplier{}})
	if err == nil || !strings.Contains(err.Error(), "stop the move's stream") {
		t.Fatalf("got %v, want a refusal naming the stream", err)
	}
}
