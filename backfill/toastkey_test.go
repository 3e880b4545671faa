package backfill

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/cdctest"
	"github.com/reshard/reshard/testkit/pgtest"
)

// A copy in primary-key order, then the stream from the slot made before
// it, over one interleaving: between two chunks, a row whose TOASTed
// payload the copy has not read yet changes its key to a smaller one the
// copy has passed (payload unchanged, so not sent), and its old key is
// taken again by a row without a payload. The copy writes the new row at
// the old key and nothing at the new one; when the stream replays the key
// change it must not move the target's row at the old key (a later row,
// not the one the change moved) to the new key: the payload would be that
// row's NULL, and no later change of the new key mends it.
func TestKeyOrderCopyThenStreamKeepsToastOfAKeyMovedBack(t *testing.T) {
	keyMovedBack(t, false)
}

// The same beside the copy gate (StreamDuringCopy, cdc.Options.CopyGate),
// with the stream behind the copy: the gate applies a change of a key the
// copy has passed over the copy's newer image, here the old key's later row.
func TestGatedCopyThenStreamKeepsToastOfAKeyMovedBack(t *testing.T) {
	keyMovedBack(t, true)
}

func keyMovedBack(t *testing.T, gated bool) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, gatedDDL)
	dst.Exec(t, gatedDDL)
	src.Exec(t, `INSERT INTO gusers SELECT g, 'u'||g, g, `+gatedBig+` FROM generate_series(1, 400) g; ANALYZE gusers`)
	pred := ring.Predicate("hashint8extended(id, 0)", gatedRanges)
	// newID: in the ranges, in the first chunk; oldID: in the ranges, a few
	// chunks later.
	newID := src.QueryInt64(t, `SELECT min(id) FROM gusers WHERE `+pred)
	oldID := src.QueryInt64(t, `SELECT max(id) FROM gusers WHERE `+pred)
	src.Exec(t, fmt.Sprintf(`DELETE FROM gusers WHERE id = %d`, newID))
	set, move, names, l0 := toastkeyMove(t, src, dst)

	wrote := false
	opts := Options{Move: move, Set: set, Ranges: gatedRanges, ChunkRows: 20, Order: OrderPK, Parallel: 1, StreamDuringCopy: gated,
		Progress: func(p Progress) {
			if wrote {
				return
			}
			wrote = true
			// After the first chunk (it read newID's place, empty), before
			// the chunk of oldID.
			src.Exec(t, fmt.Sprintf(`UPDATE gusers SET id = %d, balance = balance + 1 WHERE id = %d`, newID, oldID))
			src.Exec(t, fmt.Sprintf(`INSERT INTO gusers (id, email) VALUES (%d, 'again')`, oldID))
		}}
	st, err := Copy(ctx, src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Chunks < 3 {
		t.Fatalf("copied in %d chunks: the test needs the two keys in different chunks", st.Chunks)
	}
	onTarget := dst.QueryInt64(t, fmt.Sprintf(`SELECT count(*) FROM gusers WHERE id = %d`, newID))
	if onTarget != 0 || dst.QueryInt64(t, fmt.Sprintf(`SELECT count(*) FROM gusers WHERE id = %d AND payload IS NULL`, oldID)) != 1 {
		t.Fatalf("the copy did not read the interleaving the test builds (new key %d on the target: %d)", newID, onTarget)
	}

	so := cdc.Options{Move: move, SourceReplicationDSN: src.ReplicationDSN(), TargetDSN: dst.DSN, Slot: names.Slot,
		Publication: names.Publication, Origin: names.Origin, StartLSN: l0, Set: set, Ranges: gatedRanges,
		BatchDelay: 20 * time.Millisecond, StatusInterval: 200 * time.Millisecond}
	if gated {
		so.CopyGate = move
	}
	s := superviseGated(t, so)
	drainAndStop(t, src, s)
	sameInRanges(t, src, dst, set)
	if n := dst.QueryInt64(t, fmt.Sprintf(`SELECT count(*) FROM gusers WHERE id = %d AND payload IS NULL`, newID)); n != 0 {
		t.Errorf("key %d (moved from %d, payload unchanged) has a NULL payload on the target; the source's is 2560 bytes", newID, oldID)
	}
}

// The same key's TOASTed payload carried over two key changes in one batch
// (A to B, then B to C, payload unchanged both times) after the copy read
// A, when B is taken again by a row without a payload before the stream
// replays them: the source's row of B read for the first change is that
// later row, right for B (the stream replays its insert) but no image of
// the moved row, so the second change must not carry its NULL over to C.
func TestStreamCarriesToastOverTwoKeyChangesInOneBatch(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, gatedDDL)
	dst.Exec(t, gatedDDL)
	src.Exec(t, `INSERT INTO gusers SELECT g, 'u'||g, g, `+gatedBig+` FROM generate_series(1, 200) g; ANALYZE gusers`)
	pred := ring.Predicate("hashint8extended(id, 0)", gatedRanges)
	ids := make([]int64, 2) // B, C: in the ranges, free
	for i := range ids {
		ids[i] = src.QueryInt64(t, fmt.Sprintf(`SELECT min(g) FROM generate_series(%d, 100000) g WHERE %s`, 1000+i*1000, ring.Predicate("hashint8extended(g, 0)", gatedRanges)))
	}
	a := src.QueryInt64(t, `SELECT max(id) FROM gusers WHERE `+pred)
	b, c := ids[0], ids[1]
	set, move, names, l0 := toastkeyMove(t, src, dst)
	if _, err := Copy(ctx, src.Pool, dst.Pool, Options{Move: move, Set: set, Ranges: gatedRanges, Order: OrderPK}); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, fmt.Sprintf(`UPDATE gusers SET id = %d, balance = balance + 1 WHERE id = %d`, b, a))
	src.Exec(t, fmt.Sprintf(`UPDATE gusers SET id = %d, balance = balance + 1 WHERE id = %d`, c, b))
	src.Exec(t, fmt.Sprintf(`INSERT INTO gusers (id, email) VALUES (%d, 'again')`, b))

	// One batch holds all three (BatchDelay well above the time they take).
	s := superviseGated(t, cdc.Options{Move: move, SourceReplicationDSN: src.ReplicationDSN(), TargetDSN: dst.DSN, Slot: names.Slot,
		Publication: names.Publication, Origin: names.Origin, StartLSN: l0, Set: set, Ranges: gatedRanges,
		BatchDelay: time.Second, StatusInterval: 200 * time.Millisecond})
	drainAndStop(t, src, s)
	sameInRanges(t, src, dst, set)
	if n := dst.QueryInt64(t, fmt.Sprintf(`SELECT count(*) FROM gusers WHERE id = %d AND payload IS NULL`, c)); n != 0 {
		t.Errorf("key %d (moved from %d by way of %d, payload unchanged) has a NULL payload on the target; the source's is 2560 bytes", c, a, b)
	}
}

// toastkeyMove introspects gusers on the target and makes the move's
// publication and slot on the source (dropped at the test's end): what a
// move's JOINING leaves for the copy and the stream.
func toastkeyMove(t *testing.T, src, dst *pgtest.DB) (tableset.Set, string, cdc.Names, pglogrepl.LSN) {
	t.Helper()
	ctx := context.Background()
	spec := tableset.Spec{Name: "g", Tables: []tableset.TableSpec{{Table: "gusers", KeyColumn: "id"}}}
	set, err := tableset.Introspect(ctx, dst.Pool, spec, "target")
	if err != nil {
		t.Fatal(err)
	}
	move := fmt.Sprintf("toastkey%d", rand.Uint32())
	names := cdctest.Publication(t, ctx, src, move, set, gatedRanges)
	l0 := cdctest.Slot(t, ctx, src, names.Slot)
	t.Cleanup(func() { cdc.DropSlot(context.Background(), src.Pool, names.Slot) })
	return set, move, names, l0
}
