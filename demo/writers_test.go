package demo

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

// The writers write through the router while the test waits; Check finds
// every acknowledged write on its owner, then finds one that is lost.
func TestWritersCheckTheLedger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	control, a, b := pgtest.NewDB(t, 0), pgtest.NewDB(t, 0), pgtest.NewDB(t, 0)
	if err := topology.Migrate(ctx, control.Pool); err != nil {
		t.Fatal(err)
	}
	pools := map[string]*pgxpool.Pool{"a": a.Pool, "b": b.Pool}
	if err := CreateSchema(ctx, pools); err != nil {
		t.Fatal(err)
	}
	r, err := ring.Build([]ring.Shard{{Name: "a"}, {Name: "b"}}, ring.Options{VNodes: 8})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(ctx, pools, r, LoadOptions{Users: 200}); err != nil {
		t.Fatal(err)
	}
	store := topology.NewStore(control.Pool)
	for name, db := range map[string]*pgtest.DB{"a": a, "b": b} {
		ref, err := topology.ParseConnRef(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.RegisterShard(ctx, topology.Shard{Name: name, Conn: ref, State: topology.ShardActive}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := topology.New(r, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Publish(ctx, 0, first); err != nil {
		t.Fatal(err)
	}
	w, err := StartWriters(ctx, store, pools, WritersOptions{Users: 200, Keys: 40, Workers: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for w.stats.Acked.Load() < 100 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	var sum Summary
	if err := w.Check(ctx, pools, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Mismatches) != 0 || !sum.Placement.OK() || sum.Ledger != 40 || sum.Final.Version != 1 || sum.Stats.Acked.Load() < 100 {
		t.Fatalf("after the writers: %d lost, placement %+v, %d keys, v%d, %d acknowledged", len(sum.Mismatches), sum.Placement, sum.Ledger, sum.Final.Version, sum.Stats.Acked.Load())
	}
	// Writes the ledger acknowledged but no shard holds are found.
	for _, db := range []*pgtest.DB{a, b} {
		db.Exec(t, "UPDATE users SET name = 'lost'")
	}
	if err := w.Check(ctx, pools, &sum); err != nil || len(sum.Mismatches) == 0 {
		t.Fatalf("lost writes: %d found, %v", len(sum.Mismatches), err)
	}
}
