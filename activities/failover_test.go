package activities

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgtest"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/workflows"
)

// TestSourceFailoverSeenByEveryActivity: the source identity recorded when
// the move's slot is created goes with the move, so that after the source's
// synchronous standby is promoted mid-copy, the next copy slice stops with
// ErrTypeFailedOver instead of copying on from the promoted server (which
// has no slot) and finishing, and a fresh worker's stream reports the
// failover instead of "nothing to stream".
func TestSourceFailoverSeenByEveryActivity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg := pgtest.PG(t)
	primary := ownServer(t, pg, "actfail")
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	sb := devenv.Server{Name: "actfail_standby", Port: port, DataDir: filepath.Join(pgtest.TempDir(t, "reshard-act-standby-"), "data")}
	t.Cleanup(func() { _ = pg.Kill(context.Background(), sb) })
	if err := pg.StartStandby(ctx, primary, sb); err != nil {
		t.Fatalf("standby: %v", err)
	}
	srcPool, err := pgxpool.New(ctx, primary.DSN("postgres", false))
	if err != nil {
		t.Fatal(err)
	}
	dst := pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, name text)`
	if _, err := srcPool.Exec(ctx, ddl+`; INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 4000) g; ANALYZE users`); err != nil {
		t.Fatal(err)
	}
	dst.Exec(t, ddl)
	if err := backfill.EnsureSchema(ctx, dst.Pool); err != nil {
		t.Fatal(err)
	}

	both := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", primary.Port, sb.Port)
	newActs := func() *Activities {
		a := New(&Resolver{Shards: map[string]string{"src": both, "dst": dst.DSN}}, nil, nil)
		t.Cleanup(a.Close)
		return a
	}
	a := newActs()
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken / 2}}
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	moveID := fmt.Sprintf("actfail%d_m1", time.Now().UnixNano()%1_000_000)
	ref := workflows.MoveRef{MigrationID: "actfail", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: ranges}, Tables: spec}
	names, err := cdc.NamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	set, err := tableset.Introspect(ctx, srcPool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	if err := cdc.CreatePublication(ctx, srcPool, names.Publication, set, ranges); err != nil {
		t.Fatal(err)
	}
	// JOINING: the slot, and the server it is on.
	l0, id, err := a.createSlot(ctx, "src", names.Slot)
	if err != nil {
		t.Fatal(err)
	}
	if id.SystemID == "" || id.Timeline != 1 {
		t.Fatalf("identity at the slot's creation: %+v, want a system id on timeline 1", id)
	}
	ref.Source = &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline, L0: l0.String()}

	// A first slice copies part of the range.
	slice := workflows.CopySliceInput{Move: ref, ChunkRows: 100, Throttle: workflows.Throttle{RowsPerSec: 400}, MaxTime: 800 * time.Millisecond}
	p, err := a.CopySlice(ctx, slice)
	if err != nil {
		t.Fatal(err)
	}
	if p.Done || p.Rows == 0 {
		t.Fatalf("first slice: %+v, want part of the range copied", p)
	}
	// Written after the slot, never streamed; then the primary dies and
	// its synchronous standby is promoted.
	if _, err := srcPool.Exec(ctx, `INSERT INTO users SELECT g, 'late' FROM generate_series(4001, 4500) g`); err != nil {
		t.Fatal(err)
	}
	srcPool.Close()
	if err := pg.Kill(ctx, primary); err != nil {
		t.Fatal(err)
	}
	if err := pg.Promote(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := devenv.ClearSyncStandby(ctx, sb); err != nil {
		t.Fatal(err)
	}

	failedOver := func(what string, err error) {
		t.Helper()
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeFailedOver || !appErr.NonRetryable() {
			t.Fatalf("%s: %v, want a non-retryable %s", what, err, workflows.ErrTypeFailedOver)
		}
		if !strings.Contains(err.Error(), "timeline 1 → 2") || !strings.Contains(err.Error(), "source src failed over") {
			t.Fatalf("%s: %v, want the source and its timeline change named", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	copied := dst.QueryInt64(t, `SELECT count(*) FROM users`)
	// Attempts as Temporal makes them: a retryable error (a pooled
	// connection to the dead primary) is tried again.
	for attempt := 1; ; attempt++ {
		_, err = a.CopySlice(ctx, slice)
		var appErr *temporal.ApplicationError
		if attempt == 10 || !errors.As(err, &appErr) || appErr.NonRetryable() {
			break
		}
		t.Logf("copy slice attempt %d: %v", attempt, err)
	}
	failedOver("copy slice on the promoted source", err)
	if got := dst.QueryInt64(t, `SELECT count(*) FROM users`); got != copied {
		t.Fatalf("the copy went on on the promoted source: %d rows on the target, were %d", got, copied)
	}

	// A fresh worker (nothing in memory) starts the stream.
	cdcIn := workflows.CDCInput{Move: ref, L0: l0.String()}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	failedOver("a fresh worker's stream", newActs().RunCDC(rctx, cdcIn))
	// Without the record (a move joined before it was kept) the stream
	// cannot tell a failover from a dropped slot: what main said.
	cdcIn.Move.Source = nil
	err = newActs().RunCDC(rctx, cdcIn)
	if err == nil || !strings.Contains(err.Error(), "nothing to stream") {
		t.Fatalf("stream without the record: %v, want the dropped-slot message", err)
	}
}

// ownServer is a server of the test's own, which it may kill or promote
// without disturbing the package's shared servers.
func ownServer(t *testing.T, pg *devenv.PG, name string) devenv.Server {
	t.Helper()
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := devenv.Server{Name: name, Port: port, DataDir: filepath.Join(pgtest.TempDir(t, "reshard-act-"+name+"-"), "data")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pg.Init(ctx, s, devenv.ServerOptions{Fast: true}); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Kill(context.Background(), s) })
	return s
}
