package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/testkit/pgtest"
)

// logSeen is a slog handler that reports, once, a record with message msg.
type logSeen struct {
	msg  string
	seen chan struct{}
}

func (h *logSeen) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSeen) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logSeen) WithGroup(string) slog.Handler            { return h }
func (h *logSeen) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.seen <- struct{}{}:
		default:
		}
	}
	return nil
}

// holdCommitsOnServer makes every commit on server i that asks for
// synchronous_commit = on wait for a synchronous standby that never
// connects; every other session commits with synchronous_commit = local.
// Such a commit is flushed to WAL, and decoded by the server's walsenders,
// while the committing session waits, still in the proc array: the other
// sessions' snapshots do not see it until the wait is cancelled.
func holdCommitsOnServer(t *testing.T, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.Server(t, i).DSN("postgres", false)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	set := func(sql ...string) error {
		for _, q := range append(sql, "SELECT pg_reload_conf()") {
			if _, err := admin.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}
	if err := set("ALTER SYSTEM SET synchronous_standby_names = 'reshard_test_never_connects'", "ALTER SYSTEM SET synchronous_commit = 'local'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Errorf("reset synchronous replication settings: %v", err)
			return
		}
		defer c.Close(ctx)
		for _, q := range []string{"ALTER SYSTEM RESET synchronous_standby_names", "ALTER SYSTEM RESET synchronous_commit", "SELECT pg_reload_conf()"} {
			if _, err := c.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
	// The postmaster re-reads its configuration a moment after the reload
	// request; new sessions inherit it from then on.
	for {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		var v string
		err = c.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v)
		c.Close(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v == "local" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("synchronous_commit still %s after the reload", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A source transaction reaches the stream once its commit record is
// flushed, before it is visible to the snapshots of other sessions: the
// committing backend leaves the proc array a moment later (microseconds
// normally, a scheduler slice on a loaded machine, as long as a synchronous
// standby takes to confirm on a source that has one). A row entering the
// ranges with an unchanged TOAST value is completed by reading it from the
// source (the stream did not send the value); that read must see the
// transaction being applied, or it finds no row and the change is lost.
//
// Here the window stays open as long as the test likes: the writer's commit
// waits for a synchronous standby that never connects, and is made visible
// by cancelling that wait. (The source server is the package's server 0:
// its other tests do not run meanwhile, and the setting is reset after.)
func TestUnsentToastReadSeesTheAppliedTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holdCommitsOnServer(t, 0)
	e := newEnv(t, "visible", usersOnly...)
	outside := outsideUsers(1, 1)[0]
	inside := int64(1_000_000_000)
	for !inTestRanges(inside) {
		inside++
	}
	e.src.Exec(t, "INSERT INTO users VALUES ($1, 'moving', 7, "+bigSQL+")", outside)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	e.copyRanges(t)

	waiting := make(chan struct{}, 1)
	o := e.options()
	o.Logger = slog.New(&logSeen{msg: msgWaitVisible, seen: waiting})
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)

	// The key moves into the ranges, its TOASTed payload unchanged: the
	// stream sends an INSERT without the payload.
	wc := e.src.Conn(t)
	if _, err := wc.Exec(ctx, "SET synchronous_commit = on"); err != nil {
		t.Fatal(err)
	}
	var pid int64
	if err := wc.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	go func() {
		_, err := wc.Exec(ctx, "UPDATE users SET id = $2 WHERE id = $1", outside, inside)
		written <- err
	}()
	for e.src.QueryInt64(t, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'SyncRep'", pid) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the writer's commit never waited for the standby")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.src.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1", inside); n != 0 {
		t.Fatalf("the writer's commit is visible while it waits (%d rows): the test cannot show the race", n)
	}

	// A marker committed after the writer's commit: the stream reaches it
	// only past the writer's transaction.
	payload := fmt.Sprintf("visible-%d", rand.Int64())
	e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', $1::text)", payload)
	drained := make(chan error, 1)
	go func() {
		_, err := s.DrainToMarker(ctx, payload)
		drained <- err
	}()
	appliedInvisible := false
	select {
	case err := <-drained:
		if err != nil {
			t.Fatal(err)
		}
		appliedInvisible = true
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("the stream neither applied the writer's transaction nor waited for it")
	}
	if _, err := e.src.Pool.Exec(ctx, "SELECT pg_cancel_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if !appliedInvisible {
		if err := <-drained; err != nil {
			t.Fatal(err)
		}
	}
	drain(t, e, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if appliedInvisible {
		t.Errorf("the stream applied the writer's transaction while it was not yet visible on the source")
	}
	assertConverged(t, e, owned)
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1 AND email = 'moving' AND length(payload) > 2000", inside); n != 1 {
		t.Errorf("row %d that entered the ranges: %d on the target, want 1 with its payload", inside, n)
	}
}

func TestVisibleIn(t *testing.T) {
	const epoch1 = 1 << 32
	for _, c := range []struct {
		snap    string
		xid     uint32
		visible bool
	}{
		{"100:105:", 99, true},
		{"100:105:", 103, true}, // between xmin and xmax, not running
		{"100:105:100,103", 103, false},
		{"100:105:100,103", 100, false},
		{"100:105:100,103", 101, true},
		{"100:105:", 105, false}, // at xmax: not yet completed when the snapshot was taken
		{"100:105:", 107, false}, // past xmax
		{"100:100:", 100, false},
		{"3:3:", 3, false},
		// 32-bit ids of the previous epoch, as seen from the next one
		{fmt.Sprintf("%d:%d:", epoch1+2, epoch1+10), 4294967290, true},
		{fmt.Sprintf("%d:%d:%d", epoch1-10, epoch1+10, uint64(4294967290)), 4294967290, false},
		{fmt.Sprintf("%d:%d:%d", epoch1-10, epoch1+10, uint64(epoch1+4)), 4, false},
		{fmt.Sprintf("%d:%d:%d", epoch1-10, epoch1+10, uint64(epoch1+4)), 5, true},
		{fmt.Sprintf("%d:%d:", epoch1-10, epoch1+10), 10, false},
		// ids just ahead of xmax across the epoch boundary
		{fmt.Sprintf("%d:%d:", epoch1-20, epoch1-5), 2, false},
	} {
		got, err := visibleIn(c.snap, c.xid)
		if err != nil || got != c.visible {
			t.Errorf("visibleIn(%q, %d) = %v, %v; want %v", c.snap, c.xid, got, err, c.visible)
		}
	}
	for _, bad := range []string{"", "1:2", "x:2:", "1:y:", "1:2:z", "1:2:3,"} {
		if _, err := visibleIn(bad, 1); err == nil {
			t.Errorf("visibleIn(%q) accepted", bad)
		}
	}
}
