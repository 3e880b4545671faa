package activities

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// TestCDCStatusBeforeTheStreamApplies: a move's stream that is in the
// session but has applied nothing yet (it has not connected) reports as
// lag what the slot has not confirmed, not the whole WAL from 0/0, which
// held a move whose copy ended first in CDC_CATCH_UP for a poll interval.
func TestCDCStatusBeforeTheStreamApplies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY)`)
	dst.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY)`)
	a := New(&Resolver{Shards: map[string]string{"src": src.DSN, "dst": dst.DSN}}, nil, nil)
	t.Cleanup(a.Close)
	moveID := fmt.Sprintf("actlag%d_m1", time.Now().UnixNano()%1_000_000)
	names, err := cdc.NamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	set, err := tableset.Introspect(ctx, src.Pool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, names.Slot)
	t.Cleanup(func() { _ = cdc.DropSlot(context.Background(), src.Pool, names.Slot) })
	src.Exec(t, `INSERT INTO users SELECT generate_series(1, 1000)`)

	s, err := cdc.New(cdc.Options{Move: moveID, SourceReplicationDSN: src.ReplicationDSN(), TargetDSN: dst.DSN, Slot: names.Slot, Publication: names.Publication, Origin: names.Origin, Set: set, Ranges: ranges})
	if err != nil {
		t.Fatal(err)
	}
	a.putStream(moveID, s)
	ref := workflows.MoveRef{MigrationID: "actlag", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: ranges}, Tables: spec}
	st, err := a.CDCStatus(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	var endText, confirmedText string
	if err := src.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, names.Slot).Scan(&endText, &confirmedText); err != nil {
		t.Fatal(err)
	}
	end, err := pglogrepl.ParseLSN(endText)
	if err != nil {
		t.Fatal(err)
	}
	confirmed, err := pglogrepl.ParseLSN(confirmedText)
	if err != nil {
		t.Fatal(err)
	}
	if st.Applied != "0/0" {
		t.Fatalf("the stream applied %s before it ran", st.Applied)
	}
	if st.LagBytes <= 0 || st.LagBytes > int64(end-confirmed) {
		t.Fatalf("lag %d bytes before the stream applied anything; the slot has %d bytes unconfirmed (confirmed %s, WAL at %s)",
			st.LagBytes, end-confirmed, confirmed, end)
	}
	t.Logf("lag %d bytes, the slot's unconfirmed WAL %d bytes (the WAL from 0/0: %d bytes)", st.LagBytes, end-confirmed, uint64(end))
}
