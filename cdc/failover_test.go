package cdc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// sourceEnv is an env whose source is the database postgres of server s.
func sourceEnv(t *testing.T, s devenv.Server, move string) *env {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.DSN("postgres", false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return envWithSource(t, &pgtest.DB{Name: "postgres", Server: &s, DSN: s.DSN("postgres", false), Pool: pool}, move)
}

// envWithSource is an env whose source is src.
func envWithSource(t *testing.T, src *pgtest.DB, move string) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{src: src, dst: pgtest.NewDB(t, 1)}
	var err error
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
//
// The three cases share one source server: each stops it (that stop is
// what is measured) and the next starts it again, with its source in a
// database of its own, instead of each case running initdb for a server of
// its own (about 2 s each on 2 cores).
func TestSwitchoverDoesNotWaitForStream(t *testing.T) {
	src := pgtest.OwnServer(t, "switchover")
	for _, mode := range []string{"idle", "writing", "held"} {
		t.Run(mode, func(t *testing.T) { testSwitchover(t, src, mode) })
	}
}

func testSwitchover(t *testing.T, src devenv.Server, mode string) {
	pg := pgtest.PG(t)
	if !pg.Running(context.Background(), src) { // stopped by the case before
		if err := pg.Start(context.Background(), src); err != nil {
			t.Fatalf("start the source again: %v", err)
		}
	}
	e := envWithSource(t, pgtest.NewDBOn(t, &src), "switchover_"+mode) // slot, publication and the origin on the shared target: one per case
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
		if !pgerr.Retryable(err) {
			t.Fatalf("stream ended with %v, want a retryable error (the source went away)", err)
		}
		t.Logf("stream ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end within 10s of its source stopping")
	}
}

// TestSourceFailoverIsReported: the source's synchronous standby is promoted
// (the primary killed) while the stream is stopped, with changes committed
// after the last applied one. The stream, which follows the primary through
// a multi-host DSN, must stop with a *FailedOverError naming the timeline
// change and the missing slot — not retry, not report "no changes" — and a
// slot recreated by hand on the new primary must not hide it either.
func TestSourceFailoverIsReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg := pgtest.PG(t)
	src := pgtest.OwnServer(t, "failover")
	sb, both := pgtest.SyncStandby(t, src)
	e := sourceEnv(t, src, "failover")
	e.createSlot(t)
	o := e.options()
	o.Source = "shard_a"
	o.SourceReplicationDSN, o.SourceDSN = both+"&replication=database", both
	st, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	run := func(st *Stream) (error, time.Duration) {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		defer rcancel()
		start := time.Now()
		err := st.Run(rctx)
		return err, time.Since(start)
	}

	stop := runStream(t, st)
	e.src.Exec(t, "INSERT INTO users (id, email) SELECT g, 'u' || g FROM generate_series(1, 1000) g")
	drain(t, e, st)
	if err := stop(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	_, applied, _ := st.Positions()
	was := st.Identity()
	if !was.known() || was.Timeline != 1 {
		t.Fatalf("identity after the first run: %+v, want timeline 1", was)
	}
	// Committed on the primary (and, synchronously, on the standby) but
	// never streamed: what a repair must bring over.
	e.src.Exec(t, "UPDATE users SET balance = 7 WHERE id <= 100")
	e.src.Pool.Close()

	if err := pg.Kill(ctx, src); err != nil {
		t.Fatal(err)
	}
	if err := pg.Promote(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := devenv.ClearSyncStandby(ctx, sb); err != nil {
		t.Fatal(err)
	}

	check := func(name string, err error, took time.Duration, slotMissing bool) {
		t.Helper()
		t.Logf("%s: after %s: %v", name, took, err)
		var fe *FailedOverError
		if !errors.As(err, &fe) || !errors.Is(err, ErrFailedOver) {
			t.Fatalf("%s: %v, want a *FailedOverError", name, err)
		}
		if pgerr.Retryable(err) {
			t.Fatalf("%s: a failover is retryable: %v", name, err)
		}
		if fe.SlotMissing != slotMissing || fe.Was.Timeline != 1 || fe.Now.Timeline != 2 || fe.SystemChanged || fe.Since == 0 || fe.Since > applied {
			t.Fatalf("%s: %+v, want slot missing %v, timeline 1 → 2, same system, since the origin's position (≤ applied %s)", name, fe, slotMissing, applied)
		}
		msg := err.Error()
		for _, want := range []string{"source shard_a failed over", "timeline 1 → 2", "changes since " + fe.Since.String() + " may be missing", "repair needed"} {
			if !strings.Contains(msg, want) {
				t.Fatalf("%s: message %q lacks %q", name, msg, want)
			}
		}
		if slotMissing != strings.Contains(msg, "slot "+e.names.Slot+" missing") {
			t.Fatalf("%s: message %q and slot missing %v disagree", name, msg, slotMissing)
		}
		if took > 10*time.Second {
			t.Fatalf("%s: took %s to report, want < 10s", name, took)
		}
	}
	err, took := run(st)
	check("same stream, promoted standby without the slot", err, took, true)

	// An operator recreates the slot by hand on the new primary: it would
	// start after the changes above and skip them.
	rc, err := pgconn.Connect(ctx, sb.DSN("postgres", false)+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := CreateSlot(ctx, rc, e.names.Slot); err != nil {
		t.Fatal(err)
	}
	rc.Close(ctx)
	o.SourceIdentity = was // recorded with the move, for a new worker's stream
	st2, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	err, took = run(st2)
	check("new stream, slot recreated by hand", err, took, false)
}

// TestLostSlotIsReported: a slot whose WAL was removed (wal_status lost,
// past max_slot_wal_keep_size) is a failover of its kind: the stream stops
// with a *FailedOverError, not a retry.
func TestLostSlotIsReported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := pgtest.OwnServer(t, "lost")
	e := sourceEnv(t, src, "lost")
	e.src.Exec(t, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
	e.src.Exec(t, "SELECT pg_reload_conf()")
	e.createSlot(t)
	for i := 0; i < 4; i++ {
		e.src.Exec(t, "INSERT INTO users (id, email) SELECT g, repeat('x', 100) FROM generate_series($1::bigint * 20000 + 1, ($1::bigint + 1) * 20000) g", i)
		e.src.Exec(t, "SELECT pg_switch_wal()")
	}
	e.src.Exec(t, "CHECKPOINT")
	var status string
	if err := e.src.Pool.QueryRow(ctx, "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1", e.names.Slot).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "lost" {
		t.Fatalf("slot wal_status %q after the WAL was removed, want lost", status)
	}
	st, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	err = st.Run(rctx)
	var fe *FailedOverError
	if !errors.As(err, &fe) || !fe.SlotLost || pgerr.Retryable(err) || !strings.Contains(err.Error(), "wal_status lost") {
		t.Fatalf("run with a lost slot: %v, want a non-retryable *FailedOverError saying wal_status lost", err)
	}
	t.Logf("lost slot: %v", err)
}
