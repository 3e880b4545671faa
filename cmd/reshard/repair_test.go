package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// TestRepairOnlyWhereNothingElseWrites: verify --repair refuses a move whose
// stream or cutover could write the target (a running move, a stream
// reading its slot, a topology that gives the ranges to the target),
// changing nothing, and repairs a stopped move's target, after which nothing
// differs.
func TestRepairOnlyWhereNothingElseWrites(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text)`)
		db.Exec(t, `INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 5000) g`)
	}
	dst.Exec(t, `DELETE FROM users WHERE id BETWEEN 100 AND 119`)
	dst.Exec(t, `UPDATE users SET name = 'stale' WHERE id BETWEEN 200 AND 204`)
	dst.Exec(t, `INSERT INTO users SELECT g, 'ghost' FROM generate_series(9001, 9003) g`)
	differing := func() int64 {
		return dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id BETWEEN 100 AND 119 OR name IN ('stale', 'ghost')`)
	}
	before := differing()

	moveID := fmt.Sprintf("rep%d_m1", time.Now().UnixNano()%1_000_000_000)
	all := []ring.Range{{Lo: ring.MinToken, Hi: 0}, {Lo: 0, Hi: ring.MaxToken}}
	// The control database: shard1 owns every token (no cutover published).
	ctl := pgtest.NewDB(t, 0)
	if err := topology.Migrate(ctx, ctl.Pool); err != nil {
		t.Fatal(err)
	}
	store := topology.NewStore(ctl.Pool)
	for _, n := range []string{"shard1", "shard2"} {
		if err := store.RegisterShard(ctx, topology.Shard{Name: n, Conn: topology.ConnRef{Host: "127.0.0.1", Port: 1, Database: n, User: "postgres"}, State: topology.ShardActive}); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(prev int64, owner string) int64 {
		t.Helper()
		v, err := topology.New(ring.MustNew([]ring.VNode{{Token: 0, Shard: owner}}), nil, "owner "+owner)
		if err != nil {
			t.Fatal(err)
		}
		if v, err = store.Publish(ctx, prev, v); err != nil {
			t.Fatal(err)
		}
		return v.Version
	}
	v1 := publish(0, "shard1")
	cfg := &clusterConfig{Path: "reshard.yaml", Control: ctl.DSN, Shards: map[string]string{"shard1": src.DSN, "shard2": dst.DSN}}
	state := func(m workflows.MoveState) workflows.MigrationState {
		m.Spec = workflows.MoveSpec{ID: moveID, Source: "shard1", Target: "shard2", Ranges: all}
		return workflows.MigrationState{
			Request: workflows.MigrationRequest{ID: "rep", Tables: keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}},
			Moves:   []workflows.MoveState{m},
		}
	}
	o := repairOptions{chunkRows: 1000}

	// Refused by the move's state: nothing written.
	for _, m := range []workflows.MoveState{
		{Phase: workflows.PhaseCDCCatchUp},                                  // the stream runs
		{Phase: workflows.PhaseCutover},                                     // a cutover could run
		{Phase: workflows.PhaseVerify},                                      // verifying, holding the stream
		{Phase: workflows.PhaseGrace, Stopped: true},                        // past the cutover
		{Phase: workflows.PhaseVerify, Waiting: workflows.WaitApproval},     // a cutover may be approved
		{Phase: workflows.PhaseCutover, Waiting: workflows.WaitVerdict},     // not a failed verify
		{Phase: workflows.PhaseJoining, Stopped: true},                      // nothing copied yet
		{Phase: workflows.PhaseCDCCatchUp, Stopped: false, Paused: true},    // paused is not stopped
		{Phase: workflows.PhaseSnapshotCopy, Stopped: false, Paused: false}, // copying
	} {
		_, err := repairMoves(ctx, cfg, state(m), moveID, o)
		var rej rejectedError
		if !errors.As(err, &rej) || !strings.Contains(err.Error(), moveID) {
			t.Errorf("%s stopped=%v waiting=%q: got %v, want a refusal naming the move", m.Phase, m.Stopped, m.Waiting, err)
		}
	}
	if got := differing(); got != before {
		t.Fatalf("a refused repair changed the target: %d differing rows, were %d", got, before)
	}

	// Stopped, but a stream reads the slot: refused.
	names, err := cdc.NamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `CREATE PUBLICATION `+names.Publication+` FOR TABLE users`)
	src.Exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, names.Slot)
	t.Cleanup(func() { src.Exec(t, `SELECT pg_drop_replication_slot($1)`, names.Slot) })
	repl, err := pgconn.Connect(ctx, src.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	if err := pglogrepl.StartReplication(ctx, repl, names.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + names.Publication + "'"}}); err != nil {
		t.Fatal(err)
	}
	stopped := workflows.MoveState{Phase: workflows.PhaseCDCCatchUp, Stopped: true}
	_, err = repairMoves(ctx, cfg, state(stopped), moveID, o)
	if rej := (rejectedError{}); !errors.As(err, &rej) || !strings.Contains(err.Error(), "a stream reads slot") {
		t.Errorf("stream reading the slot: got %v, want a refusal (exit 3)", err)
	}
	repl.Close(ctx)
	if got := differing(); got != before {
		t.Fatalf("a refused repair changed the target: %d differing rows, were %d", got, before)
	}

	// Stopped, the slot idle (or gone): repaired.
	for i, m := range []workflows.MoveState{stopped, {Phase: workflows.PhaseVerify, Waiting: workflows.WaitVerdict}} {
		deadline := time.Now().Add(10 * time.Second)
		var rs []repairedMove
		for {
			rs, err = repairMoves(ctx, cfg, state(m), moveID, o)
			if err == nil || !strings.Contains(err.Error(), "a stream reads slot") || time.Now().After(deadline) {
				break // the walsender ends a moment after its connection
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: %v", m.Phase, err)
		}
		r := rs[0].Report
		t.Logf("%s: %d of %d chunks repaired, %d rows copied, %d deleted", m.Phase, r.Repaired, r.Chunks, r.RowsCopied, r.RowsDeleted)
		if i == 0 && (r.RowsCopied != 25 || r.RowsDeleted != 8) {
			t.Errorf("copied %d and deleted %d rows, want 25 (20 missing, 5 stale) and 8 (5 stale, 3 extra)", r.RowsCopied, r.RowsDeleted)
		}
		if i == 1 && (r.RowsCopied != 0 || r.RowsDeleted != 0) {
			t.Errorf("second repair copied %d and deleted %d rows, want none", r.RowsCopied, r.RowsDeleted)
		}
	}
	if got := differing(); got != 20 { // the 20 missing rows are back with their source names
		t.Errorf("after the repair %d rows match the differing ones, want the 20 copied back", got)
	}
	if got := dst.QueryInt64(t, `SELECT count(*) FROM users WHERE name IN ('stale', 'ghost')`); got != 0 {
		t.Errorf("%d stale or extra rows left on the target", got)
	}

	// A cutover published (the topology gives the ranges to the target,
	// whatever the state said a moment ago): refused, nothing written, the
	// reverse slot, which holds the target's writes since, kept.
	publish(v1, "shard2")
	rev, err := cdc.ReverseNamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	dst.Exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, rev.Slot)
	t.Cleanup(func() {
		dst.Exec(t, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, rev.Slot)
	})
	dst.Exec(t, `UPDATE users SET name = 'new owner' WHERE id = 300`)
	_, err = repairMoves(ctx, cfg, state(stopped), moveID, o)
	if rej := (rejectedError{}); !errors.As(err, &rej) || !strings.Contains(err.Error(), "the move cut over") {
		t.Errorf("topology gives the ranges to the target: got %v, want a refusal (exit 3)", err)
	}
	if got := dst.QueryInt64(t, `SELECT count(*) FROM users WHERE name = 'new owner'`); got != 1 {
		t.Errorf("a refused repair changed the target: %d rows of the new owner's write left, want 1", got)
	}
	if got := dst.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, rev.Slot); got != 1 {
		t.Errorf("a refused repair dropped the reverse slot")
	}
}
