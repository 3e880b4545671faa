package verify

import (
	"context"
	"testing"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestRepairMoveDropsTheReverseSlot: `reshard verify --repair` on a move
// whose aborted cutover attempt left its reverse slot on the target drops
// that slot before it writes: the repair's rows carry no replication origin,
// and GRACE's reverse stream from the old slot would send them back over
// newer rows on the source. The next attempt makes the slot again.
func TestRepairMoveDropsTheReverseSlot(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE kv (k bigint PRIMARY KEY, v text NOT NULL)`
	src.Exec(t, ddl)
	dst.Exec(t, ddl)
	src.Exec(t, "INSERT INTO kv SELECT g, 'v' || g FROM generate_series(1, 200) g")
	dst.Exec(t, "INSERT INTO kv SELECT g, 'v' || g FROM generate_series(1, 200) g")
	dst.Exec(t, "UPDATE kv SET v = 'differs' WHERE k = 7")
	m := Move{ID: "rmslot_m1", Source: "src", Target: "dst"}
	rev, err := cdc.ReverseNamesFor(m.ID)
	if err != nil {
		t.Fatal(err)
	}
	dst.Exec(t, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", rev.Slot)
	t.Cleanup(func() {
		dst.Exec(t, "SELECT pg_drop_replication_slot($1) FROM pg_replication_slots WHERE slot_name = $1", rev.Slot)
	})

	spec := tableset.Spec{Name: "kv", Tables: []tableset.TableSpec{{Table: "kv", KeyColumn: "k"}}}
	rep, err := RepairMove(ctx, src.Pool, dst.Pool, m, spec, Options{Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, ChunkRows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RowsCopied != 1 {
		t.Fatalf("repair copied %d rows, want the 1 that differs", rep.RowsCopied)
	}
	if n := dst.QueryInt64(t, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", rev.Slot); n != 0 {
		t.Fatalf("the reverse slot %s is still on the target after the repair", rev.Slot)
	}
}
