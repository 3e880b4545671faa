package cdc

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgtest"
	"github.com/reshard/reshard/tableset"
)

// ownServer is a source server of the test's own, which it may stop,
// promote or kill without disturbing the package's shared servers.
func ownServer(t *testing.T, name string) devenv.Server {
	t.Helper()
	pg := pgtest.PG(t)
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := devenv.Server{Name: name, Port: port, DataDir: filepath.Join(pgtest.TempDir(t, "reshard-cdc-"+name+"-"), "data")}
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

// sourceEnv is an env whose source is the database postgres of server s.
func sourceEnv(t *testing.T, s devenv.Server, move string) *env {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, s.DSN("postgres", false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := &env{src: &pgtest.DB{Name: "postgres", Server: &s, DSN: s.DSN("postgres", false), Pool: pool}, dst: pgtest.NewDB(t, 1)}
	e.src.Exec(t, schemaSQL)
	e.dst.Exec(t, schemaSQL)
	if e.set, err = tableset.Introspect(ctx, e.dst.Pool, tableset.Spec{Name: "s", Tables: usersOnly}, "target"); err != nil {
		t.Fatal(err)
	}
	if e.names, err = NamesFor(move); err != nil {
		t.Fatal(err)
	}
	if err := CreatePublication(ctx, e.src.Pool, e.names.Publication, e.set, testRanges); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSwitchoverDoesNotWaitForStream: a clean stop (pg_ctl stop -m fast) of
// a source a stream reads from completes in seconds, and the stream ends
// with a retryable error, whether the stream is idle, applying live writes,
// or held (the cutover's write pause: the applier waits and reads nothing).
// A walsender that waits for its client to confirm the shutdown checkpoint
// holds the shutdown for up to wal_sender_timeout (60 s): a planned
// switchover hung on reshard (patroni#3522).
func TestSwitchoverDoesNotWaitForStream(t *testing.T) {
	for _, mode := range []string{"idle", "writing", "held"} {
		t.Run(mode, func(t *testing.T) { testSwitchover(t, mode) })
	}
}

func testSwitchover(t *testing.T, mode string) {
	src := ownServer(t, "switchover")
	e := sourceEnv(t, src, "switchover_"+mode) // the origin on the shared target is per server: one per subtest
	e.createSlot(t)
	st, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	e.src.Exec(t, "INSERT INTO users (id, email) SELECT g, 'u' || g FROM generate_series(1, 2000) g")
	drain(t, e, st)
	switch mode {
	case "writing":
		startWriter(t, e.src, false, 7)
		time.Sleep(time.Second)
	case "held":
		var lsn string
		if err := e.src.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		at, _ := pglogrepl.ParseLSN(lsn)
		hctx, hcancel := context.WithTimeout(ctx, 30*time.Second)
		defer hcancel()
		if err := st.HoldAt(hctx, at); err != nil {
			t.Fatalf("hold at %s: %v", at, err)
		}
		// Writes the held stream does not read.
		e.src.Exec(t, "UPDATE users SET balance = balance + 1")
	}

	start := time.Now()
	if err := pgtest.PG(t).Stop(context.Background(), src); err != nil {
		t.Fatalf("pg_ctl stop -m fast of the source after %s: %v", time.Since(start), err)
	}
	took := time.Since(start)
	t.Logf("pg_ctl stop -m fast of the source with a %s stream: %s", mode, took)
	if took > 10*time.Second {
		t.Fatalf("the source took %s to stop with a %s stream, want < 10s", took, mode)
	}
	select {
	case err := <-done:
		if !IsRetryable(err) {
			t.Fatalf("stream ended with %v, want a retryable error (the source went away)", err)
		}
		t.Logf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end within 10s of its source stopping")
	}
}
