package verify

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// The scenario (#31): a verify passed, then a cutover attempt was
// aborted by a long transaction on the source, and a row changed meanwhile.
// The verify before the next attempt re-checks the run: it compares the
// chunks the changes since touched (more than 0 rows), reuses the others,
// and does not wait for the long transaction, which a slot's snapshot does;
// a difference planted in a changed row is found.
func TestRecheckAfterAbortedCutover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, liveSchema)
	dst.Exec(t, liveSchema)
	src.Exec(t, `INSERT INTO users SELECT g, 'u' || g, g % 100, md5(g::text) FROM generate_series(1, 20000) g`)
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: -4_000_000_000_000_000_000}, {Lo: 2_000_000_000_000_000_000, Hi: 6_000_000_000_000_000_000}}
	spec := tableset.Spec{Name: "users", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}
	srcSet := introspect(t, src, spec)
	dstSet, err := tableset.Introspect(ctx, dst.Pool, spec, "target")
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	stop := liveWriters(t, ctx, src, &writes)

	names, l0 := slotOf(t, ctx, src, "recheck", dstSet, ranges)
	if _, err := backfill.Copy(ctx, src.Pool, dst.Pool, backfill.Options{Move: "recheck", Set: srcSet, Ranges: ranges, ChunkRows: 5000}); err != nil {
		t.Fatal(err)
	}
	stream := runStream(t, ctx, src, dst, "recheck", names, l0, dstSet, ranges)

	opts := Options{RunID: "recheck_v0", Set: srcSet, Ranges: ranges, Holder: stream, ChunkRows: 1500, Parallel: 2, BisectRows: 200}
	first, err := Run(ctx, src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	chunks := len(first.Tables[0].Chunks)
	if !first.OK() || first.Rows < 5000 || chunks < 4 {
		t.Fatalf("first verify: ok=%v, %d rows in %d chunks", first.OK(), first.Rows, chunks)
	}
	t.Logf("verify at %s: %d rows in %d chunks", first.LSN, first.Rows, chunks)

	// The long transaction that aborts the cutover: it holds an xid, so a
	// slot created now waits for it.
	blocker, err := src.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Release()
	if _, err := blocker.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `SELECT txid_current()`); err != nil {
		t.Fatal(err)
	}
	defer blocker.Exec(context.Background(), `ROLLBACK`) //nolint:errcheck
	sctxShort, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	_, err = Run(sctxShort, src.Pool, dst.Pool, Options{RunID: "recheck_slot", Set: srcSet, Ranges: ranges, Holder: stream, ChunkRows: 1500})
	cancelShort()
	if err == nil {
		t.Fatal("a verify through a slot's snapshot finished while a transaction holding an xid was open: the scenario no longer shows what the re-check avoids")
	}
	t.Logf("through a slot, with the long transaction open: %v", err)

	// Under the live writes: the re-check compares rows, and no false
	// mismatch.
	start := time.Now()
	live, err := Run(ctx, src.Pool, dst.Pool, withRecheck(opts))
	if err != nil {
		t.Fatalf("re-check under live writes: %v", err)
	}
	if !live.OK() || live.Rows == 0 {
		t.Fatalf("re-check under live writes at %s: ok=%v, %d rows compared, %d reused: %+v", live.LSN, live.OK(), live.Rows, live.ReusedRows, live.Tables[0].AllKeys())
	}
	t.Logf("re-check under live writes at %s, long transaction open: %d rows compared, %d reused, %v", live.LSN, live.Rows, live.ReusedRows, time.Since(start).Round(time.Millisecond))
	stop()
	// The writes after that re-check touched every chunk: one more, quiet.
	if quiet, err := Run(ctx, src.Pool, dst.Pool, withRecheck(opts)); err != nil || !quiet.OK() {
		t.Fatalf("quiet re-check: %v", err)
	}

	// One row changed at the aborted cutover: its chunk alone is compared.
	changed := inRange(t, src, ranges, 1, 20000, true)
	src.Exec(t, `INSERT INTO users VALUES ($1, 'at the cutover', 1, 'x') ON CONFLICT (id) DO UPDATE SET email = 'at the cutover'`, changed)
	one, err := Run(ctx, src.Pool, dst.Pool, withRecheck(opts))
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, c := range one.Tables[0].Chunks {
		if !c.Resumed {
			compared++
		}
	}
	if !one.OK() || one.Rows == 0 || one.ReusedRows == 0 || compared != 1 {
		t.Fatalf("re-check after one change: ok=%v, %d rows compared in %d of %d chunks, %d reused", one.OK(), one.Rows, compared, chunks, one.ReusedRows)
	}
	t.Logf("re-check after one change at %s: %d rows compared in %d of %d chunks, %d reused", one.LSN, one.Rows, compared, chunks, one.ReusedRows)

	// A difference in a changed row, planted behind the applier's back.
	src.Exec(t, `UPDATE users SET balance = balance + 1 WHERE id = $1`, changed)
	waitTarget(t, dst, changed, "SELECT balance FROM users WHERE id = $1", src.QueryInt64(t, "SELECT balance FROM users WHERE id = $1", changed))
	dst.Exec(t, `UPDATE users SET email = 'planted' WHERE id = $1`, changed)
	bad, err := Run(ctx, src.Pool, dst.Pool, withRecheck(opts))
	if err != nil {
		t.Fatal(err)
	}
	keys := bad.Tables[0].AllKeys()
	if bad.OK() || bad.Mismatches() != 1 || keys[0].Kind != Different {
		t.Fatalf("planted difference in row %d: ok=%v, %d mismatches %+v", changed, bad.OK(), bad.Mismatches(), keys)
	}
	t.Logf("planted difference found: %s %v", keys[0].Kind, keys[0].Key)
}

func withRecheck(o Options) Options {
	o.Recheck = true
	return o
}

// waitTarget waits until the target's value of sql for id is want.
func waitTarget(t *testing.T, dst *pgtest.DB, id int64, sql string, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for dst.QueryInt64(t, sql, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("the target never applied %s = %d for id %d", sql, want, id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
