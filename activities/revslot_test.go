package activities

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// TestPrepareReverseRecreatesOnlyBeforeThePublish: PrepareReverse keeps an
// earlier attempt's reverse slot (its position again), makes it again when
// asked (RecreateReverse: a repair wrote the target since; the new slot's
// position comes after that write), and, once the topology gives the moving
// ranges to the target (a cutover published), refuses to drop it: the slot
// then holds the target's writes the source needs.
func TestPrepareReverseRecreatesOnlyBeforeThePublish(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst, ctl := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 0)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, name text)`
	src.Exec(t, ddl)
	dst.Exec(t, ddl)
	if err := topology.Migrate(ctx, ctl.Pool); err != nil {
		t.Fatal(err)
	}
	store := topology.NewStore(ctl.Pool)
	for _, n := range []string{"src", "dst"} {
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
	v1 := publish(0, "src")

	a := New(&Resolver{Control: ctl.DSN, Shards: map[string]string{"src": src.DSN, "dst": dst.DSN}}, nil, nil)
	t.Cleanup(a.Close)
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	moveID := fmt.Sprintf("revslot%d_m1", time.Now().UnixNano()%1_000_000)
	ranges := []ring.Range{{Lo: -1e18, Hi: 1e18}}
	req := workflows.MigrationRequest{ID: "revslot", Kind: workflows.KindMove, Range: &ranges[0], To: "dst", Tables: spec}
	ref := workflows.MoveRef{MigrationID: "revslot", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: ranges}, Tables: spec,
		FromVersion: v1, Request: &req}
	names, err := cdc.ReverseNamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dst.Exec(t, "SELECT pg_drop_replication_slot($1) FROM pg_replication_slots WHERE slot_name = $1", names.Slot)
	})
	prepare := func(recreate bool) (pglogrepl.LSN, error) {
		t.Helper()
		in := ref
		in.RecreateReverse = recreate
		r, err := a.PrepareReverse(ctx, in)
		if err != nil {
			return 0, err
		}
		return pglogrepl.ParseLSN(r.L0)
	}
	must := func(l pglogrepl.LSN, err error) pglogrepl.LSN {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	write := func() { dst.Exec(t, "INSERT INTO users SELECT coalesce(max(id), 0) + 1, 'w' FROM users") }

	first := must(prepare(false))
	write() // as a repair's, no origin
	if again := must(prepare(false)); again != first {
		t.Fatalf("a second PrepareReverse without RecreateReverse returned %s, want the slot kept at %s", again, first)
	}
	fresh := must(prepare(true))
	if fresh <= first {
		t.Fatalf("PrepareReverse with RecreateReverse returned %s, want a new slot after the write (the old one is at %s)", fresh, first)
	}

	// The cutover published: the target owns the ranges.
	publish(v1, "dst")
	write() // the application's, on the new owner: the reverse stream must send it
	_, err = prepare(true)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() {
		t.Fatalf("RecreateReverse after the publish: %v, want a non-retryable refusal", err)
	}
	t.Logf("refused: %v", err)
	var kept string
	if err := dst.Pool.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", names.Slot).Scan(&kept); err != nil {
		t.Fatalf("the reverse slot after the refusal: %v", err)
	}
	if kept != fresh.String() {
		t.Fatalf("the reverse slot is at %s after the refusal, want it kept at %s", kept, fresh)
	}
}
