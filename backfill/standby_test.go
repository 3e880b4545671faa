package backfill

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestCopyFromStandbyWaitsForTheSlot: the standby's replay is paused, and
// rows are written on the primary after it, up to the "slot's" position L0.
// A copy from the standby must not read a chunk before the standby has
// replayed L0 (it would miss those rows, which the stream, starting at L0,
// never brings): it waits, copies nothing, and says why when its slice
// ends; once replay resumes it copies every row, the late ones included.
// A server that is not in recovery is refused as a standby.
func TestCopyFromStandbyWaitsForTheSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	db := pgtest.NewDB(t, 0)
	sb := pgtest.Standby(t, 0)
	t.Logf("standby in %s", time.Since(t0))
	src := db.Pool
	stb, err := pgxpool.New(ctx, sb.DSN(db.Name, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stb.Close)
	dst := pgtest.NewDB(t, 1)
	const table = `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL)`
	dst.Exec(t, table)
	if _, err := src.Exec(ctx, table+`; INSERT INTO users SELECT g, 'early' || g FROM generate_series(1, 2000) g`); err != nil {
		t.Fatal(err)
	}
	waitReplayed(t, ctx, src, stb)
	if _, err := stb.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = stb.Exec(context.Background(), `SELECT pg_wal_replay_resume()`) })
	if _, err := src.Exec(ctx, `INSERT INTO users SELECT g, 'late' || g FROM generate_series(2001, 3000) g`); err != nil {
		t.Fatal(err)
	}
	// The insert position, not pg_current_wal_lsn(): test servers run with
	// synchronous_commit off, so the write position can still be short of
	// the late rows' commit (CI saw L0 there, and a copy that rightly
	// found the standby past it and read 2,000 rows).
	var l0s string
	if err := src.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&l0s); err != nil {
		t.Fatal(err)
	}
	l0, err := pglogrepl.ParseLSN(l0s)
	if err != nil {
		t.Fatal(err)
	}
	set, err := tableset.Introspect(ctx, stb, tableset.Spec{Name: "app", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "standby")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Move: "copysb", Set: set, Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, ChunkRows: 500,
		Standby: &Standby{Name: "standby of copysb", Floor: l0, Poll: 20 * time.Millisecond}}

	sctx, scancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	st, err := Copy(sctx, stb, dst.Pool, opts)
	scancel()
	var lag *ReplayLag
	if !errors.As(err, &lag) || lag.Floor != l0 || lag.Replayed >= l0 || lag.PauseState == "not paused" {
		t.Fatalf("copy from a paused standby behind L0: %v (stats %+v), want a *ReplayLag naming L0 %s and the paused replay", err, st, l0)
	}
	if !pgerr.Retryable(err) {
		t.Fatalf("a lagging standby must be retryable: %v", err)
	}
	t.Logf("while paused: %v", err)
	if n := dst.QueryInt64(t, `SELECT count(*) FROM users`); n != 0 || st.Rows != 0 {
		t.Fatalf("the copy wrote %d rows (stats %d) before the standby replayed L0, want 0", n, st.Rows)
	}

	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = stb.Exec(context.Background(), `SELECT pg_wal_replay_resume()`)
	}()
	st, err = Copy(ctx, stb, dst.Pool, opts)
	if err != nil {
		t.Fatalf("copy once the standby resumed: %v", err)
	}
	if n, late := dst.QueryInt64(t, `SELECT count(*) FROM users`), dst.QueryInt64(t, `SELECT count(*) FROM users WHERE email LIKE 'late%'`); n != 3000 || late != 1000 {
		t.Fatalf("the target has %d rows, %d of them written just before L0; want 3000 and 1000", n, late)
	}
	t.Logf("copied %d rows from the standby after it replayed %s", st.Rows, l0)

	opts.Move, opts.Standby.Name = "copysb_primary", "primary given as the standby"
	if _, err := Copy(ctx, src, dst.Pool, opts); !errors.As(err, new(*NotStandbyError)) {
		t.Fatalf("copy from a primary given as the standby: %v, want *NotStandbyError", err)
	}
}

// waitReplayed waits until the standby has replayed what the primary wrote.
func waitReplayed(t *testing.T, ctx context.Context, primary, standby *pgxpool.Pool) {
	t.Helper()
	var at string
	if err := primary.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	for {
		var ok bool
		if err := standby.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, at).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the standby did not replay %s", at)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestRecoveryConflictIsTold(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40001", Message: "canceling statement due to conflict with recovery"}, true},
		{&pgconn.PgError{Code: "40P01", Message: "canceling statement due to conflict with recovery"}, true},
		{&pgconn.PgError{Code: "40001", Message: "could not serialize access due to concurrent update"}, false},
		{errors.New("canceling statement due to conflict with recovery"), false},
	} {
		if got := pgerr.RecoveryConflict(c.err); got != c.want {
			t.Errorf("RecoveryConflict(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
