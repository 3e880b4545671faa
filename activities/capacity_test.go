package activities

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// PLAN predicts each move's cost, stores the prediction with the plan and
// puts it in the move's spec (status reads it there); a plan whose target
// would outgrow its disk_bytes is refused as a preflight problem (the
// workflow ends before JOINING: nothing started).
func TestPlanPredictsAndRefusesWhatCannotFit(t *testing.T) {
	control, s1, s2 := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	for _, db := range []*pgtest.DB{s1, s2} {
		db.Exec(t, `CREATE TABLE kv (k bigint PRIMARY KEY, v text)`)
	}
	s1.Exec(t, `INSERT INTO kv SELECT g, md5(g::text) FROM generate_series(1, 5000) g; ANALYZE kv`)
	a := New(&Resolver{Control: control.DSN, Shards: map[string]string{"s1": s1.DSN, "s2": s2.DSN}}, nil, nil)
	defer a.Close()
	a.CapacityWALWindow = 200 * time.Millisecond
	ctx := context.Background()
	store, err := a.store(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	ref, err := topology.ParseConnRef(s1.DSN)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.RegisterShard(ctx, topology.Shard{Name: "s1", Conn: ref, State: topology.ShardActive}); err != nil {
		t.Fatal(err)
	}
	r, err := ring.Build([]ring.Shard{{Name: "s1"}}, ring.Options{VNodes: 4})
	if err != nil {
		t.Fatal(err)
	}
	first, err := topology.New(r, nil, "initial")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Publish(ctx, 0, first); err != nil {
		t.Fatal(err)
	}
	req := workflows.MigrationRequest{ID: "cap-1", Kind: workflows.KindAddNode, Shard: "s2", VNodes: 4,
		Tables: keyspace.Spec{Name: "kv", Tables: []keyspace.TableSpec{{Table: "kv", KeyColumn: "k"}}}}

	a.SetBudgets(map[string]capacity.Budget{"s2": {DiskBytes: 4096}})
	_, err = a.plan(ctx, req)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != workflows.ErrTypePreflight || !app.NonRetryable() ||
		!strings.Contains(err.Error(), "capacity: s2: as a target it grows by") || !strings.Contains(err.Error(), "fix: free space on s2") {
		t.Fatalf("PLAN onto a target without the disk: %v", err)
	}

	req.ID = "cap-2"
	a.SetBudgets(map[string]capacity.Budget{"s2": {DiskBytes: 1 << 30}})
	res, err := a.plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Moves {
		if m.Predicted == nil || m.Predicted.Copy <= 0 || m.Predicted.Verify <= 0 || m.Predicted.TargetGrowthBytes <= 0 {
			t.Fatalf("move %s: predicted %+v", m.ID, m.Predicted)
		}
	}
	p, err := store.LoadPlan(ctx, "cap-2")
	if err != nil {
		t.Fatal(err)
	}
	var stored capacity.Report
	if err := json.Unmarshal(p.Capacity, &stored); err != nil || len(stored.Moves) != len(res.Moves) || stored.Moves[0].Copy <= 0 {
		t.Fatalf("stored capacity %s: %v", p.Capacity, err)
	}
}

// A copy slice runs under the slot guard: with the move's slot at 85 % of
// the source's configured WAL budget it is braked, and the brake carries to
// the next slice.
func TestCopySliceBrakedNearTheWALBudget(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `CREATE TABLE kv (k bigint PRIMARY KEY, v text)`)
	}
	src.Exec(t, `INSERT INTO kv SELECT g, md5(g::text) FROM generate_series(1, 20000) g`)
	names, err := cdc.NamesFor("m_guard")
	if err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `SELECT pg_create_logical_replication_slot('`+names.Slot+`', 'pgoutput')`)
	src.Exec(t, `CREATE TABLE noise AS SELECT g, repeat('x', 500) AS pad FROM generate_series(1, 10000) g`)
	ctx := context.Background()
	if err := backfill.EnsureSchema(ctx, dst.Pool); err != nil { // JOINING's
		t.Fatal(err)
	}
	r, err := backfill.ReadSlot(ctx, src.Pool, names.Slot, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := New(&Resolver{Shards: map[string]string{"a": src.DSN, "b": dst.DSN}}, nil, nil)
	defer a.Close()
	a.SetBudgets(map[string]capacity.Budget{"a": {WALBytes: r.Retained * 100 / 85}})
	move := workflows.MoveRef{MigrationID: "m", Tables: keyspace.Spec{Name: "kv", Tables: []keyspace.TableSpec{{Table: "kv", KeyColumn: "k"}}},
		Spec: workflows.MoveSpec{ID: "m_guard", Source: "a", Target: "b", Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, EstRows: 20000}}
	in := workflows.CopySliceInput{Move: move, ChunkRows: 200, MaxTime: 5 * time.Second, Throttle: workflows.Throttle{RowsPerSec: 2000}}
	p, err := a.copySlice(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := a.guardRates.Load("m_guard")
	t.Logf("slice 1: %d rows in 5 s at 2000 rows/s with the slot at 85%% of its budget; guard rate %v", p.Rows, v)
	if !ok || v.(float64) <= 0 || v.(float64) >= 1000 {
		t.Fatalf("copy not braked: guard rate %v after 5 s (a reading every 2 s halves it)", v)
	}
	// The next slice starts braked.
	in.MaxTime = 3 * time.Second
	p2, err := a.copySlice(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("slice 2: %d rows in 3 s", p2.Rows-p.Rows)
	if p2.Rows-p.Rows >= 3000 { // unbraked: 6000
		t.Fatalf("the next slice was not braked: %d rows in 3 s at 2000 rows/s", p2.Rows-p.Rows)
	}
}
