package activities

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// TestMoveReadFromStandby: a move run with --read-from standby through the
// activities, writers busy on the primary all along: the copy slices and
// the verify read the source's standby (the configuration's standby of
// shard src), the slot and stream stay on the primary. The verify passes,
// and once the writers stop and the stream drains, the target holds
// exactly the primary's moving rows. A standby entry that names a server
// which is not a standby of the source stops the copy, non-retryable,
// naming the fix.
func TestMoveReadFromStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, name text, n int NOT NULL DEFAULT 0)`
	src.Exec(t, ddl+`; INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 8000) g; ANALYZE users`)
	dst.Exec(t, ddl)
	if err := backfill.EnsureSchema(ctx, dst.Pool); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	sb := pgtest.Standby(t, 0)
	t.Logf("standby of server 0 in %s", time.Since(t0).Round(time.Millisecond))
	defer func() { t.Logf("the rest in %s", time.Since(t0).Round(time.Millisecond)) }()
	a := New(&Resolver{Shards: map[string]string{"src": src.DSN, "dst": dst.DSN}, Standbys: map[string]string{"src": sb.DSN(src.Name, false)}}, nil, nil)
	t.Cleanup(a.Close)

	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken / 3}}
	inRange := ring.Predicate("hashint8extended(id, 0)", ranges)
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	moveID := fmt.Sprintf("actsb%d_m1", time.Now().UnixNano()%1_000_000)
	req := &workflows.MigrationRequest{ID: "actsb", ReadFrom: workflows.ReadFromStandby}
	ref := workflows.MoveRef{MigrationID: "actsb", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: ranges}, Tables: spec, Request: req}

	writes, stop := startUserWriters(ctx, src.Pool, 9600, 3, `INSERT INTO users VALUES ($1, 'w', 1) ON CONFLICT (id) DO UPDATE SET n = users.n + 1, name = 'w'`)
	defer stop()

	// PLAN refuses a standby entry that is no standby of src, or none,
	// before anything is made; it passes the real one.
	wrong := New(&Resolver{Shards: map[string]string{"src": src.DSN, "dst": dst.DSN}, Standbys: map[string]string{"src": dst.DSN}}, nil, nil)
	t.Cleanup(wrong.Close)
	none := New(&Resolver{Shards: map[string]string{"src": src.DSN, "dst": dst.DSN}}, nil, nil)
	t.Cleanup(none.Close)
	for _, c := range []struct {
		name string
		a    *Activities
		want string
	}{{"a server that is no standby of src", wrong, "not in recovery"}, {"no standby", none, "has no standby"}} {
		err := c.a.PreflightMove(ctx, ref)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypePreflight || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("PLAN with %s: %v, want a %s error saying %q", c.name, err, workflows.ErrTypePreflight, c.want)
		}
		t.Logf("PLAN with %s: %v", c.name, err)
	}
	if err := a.PreflightMove(ctx, ref); err != nil {
		t.Fatalf("PLAN with src's own standby: %v", err)
	}

	names, err := cdc.NamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	set, err := tableset.Introspect(ctx, src.Pool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	if err := cdc.CreatePublication(ctx, src.Pool, names.Publication, set, ranges); err != nil {
		t.Fatal(err)
	}
	l0, id, err := join.Slot(ctx, a.replication("src"), "src", names.Slot)
	if err != nil {
		t.Fatal(err)
	}
	ref.Source = &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline, L0: l0.String()}

	// The standby entry names a server that is no standby of src.
	_, err = wrong.CopySlice(ctx, workflows.CopySliceInput{Move: ref, ChunkRows: 1000, MaxTime: 5 * time.Second})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || !strings.Contains(err.Error(), "shards.src.standby") {
		t.Fatalf("copy from a server that is no standby of src: %v, want a non-retryable error naming shards.src.standby", err)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM users`); n != 0 {
		t.Fatalf("the refused copy wrote %d rows", n)
	}

	slices := 0
	for {
		p, err := a.CopySlice(ctx, workflows.CopySliceInput{Move: ref, ChunkRows: 1000, MaxTime: 2 * time.Second})
		if err != nil {
			t.Fatalf("copy slice %d: %v", slices, err)
		}
		slices++
		if p.Done {
			t.Logf("copied %d rows from the standby in %d slices", p.Rows, slices)
			break
		}
	}

	sctx, stopStream := context.WithCancel(ctx)
	streamDone := make(chan error, 1)
	go func() { streamDone <- a.RunCDC(sctx, workflows.CDCInput{Move: ref, L0: l0.String()}) }()
	defer func() {
		stopStream()
		if err := <-streamDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stream: %v", err)
		}
	}()
	before := writes.Load()
	sum, err := a.Verify(ctx, workflows.VerifyInput{Move: ref, RunID: moveID + "_v1"})
	if err != nil {
		t.Fatalf("verify from the standby: %v", err)
	}
	if !sum.Passed || sum.Rows < 3000 {
		t.Fatalf("verify from the standby: %+v", sum)
	}
	t.Logf("verify from the standby: %d rows, 0 mismatches, %d writes on the primary meanwhile", sum.Rows, writes.Load()-before)

	stop()
	q := `SELECT coalesce(string_agg(u::text, '|' ORDER BY id), '') FROM users u WHERE ` + inRange
	deadline := time.Now().Add(60 * time.Second)
	for {
		var want, got string
		if err := src.Pool.QueryRow(ctx, q).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if err := dst.Pool.QueryRow(ctx, q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want == got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after %d writes stopped, the target's moving rows still differ from the primary's", writes.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after %d writes on the primary, the target holds exactly its %d moving rows", writes.Load(), dst.QueryInt64(t, `SELECT count(*) FROM users`))
}

// startUserWriters starts two writers on pool's users table (id bigint
// PRIMARY KEY, name text, n int), each deleting (one write in four) or
// upserting with upsert (its $1 the id) a random id in 1..maxID, from
// its own seeded generator, until stop, which waits for them and may be
// called again; writes counts the ones that succeeded.
func startUserWriters(ctx context.Context, pool *pgxpool.Pool, maxID int64, seed uint64, upsert string) (writes *atomic.Int64, stop func()) {
	writes = new(atomic.Int64)
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), seed))
			for wctx.Err() == nil {
				id := rnd.Int64N(maxID) + 1
				var err error
				switch rnd.IntN(4) {
				case 0:
					_, err = pool.Exec(wctx, `DELETE FROM users WHERE id = $1`, id)
				default:
					_, err = pool.Exec(wctx, upsert, id)
				}
				if err == nil {
					writes.Add(1)
				}
			}
		})
	}
	var once sync.Once
	return writes, func() {
		once.Do(func() {
			stopWriters()
			wg.Wait()
		})
	}
}
