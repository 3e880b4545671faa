package verify

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestMoveReadFromStandbyUnderLiveWrites: a move in miniature whose copy
// and verifies read the source's streaming standby while the slot and the
// writers stay on the primary. Every verify, at a standby snapshot paired
// with the applier's hold, finds the target equal; once the writers stop
// and the stream drains, the target holds exactly the primary's moving
// rows (nothing lost, nothing extra); a planted row is found.
func TestMoveReadFromStandbyUnderLiveWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, liveSchema)
	dst.Exec(t, liveSchema)
	src.Exec(t, `INSERT INTO users SELECT g, 'u' || g, g % 100, md5(g::text) FROM generate_series(1, 20000) g`)
	t0 := time.Now()
	sb := pgtest.Standby(t, 0)
	t.Logf("standby of server 0 in %s", time.Since(t0).Round(time.Millisecond))
	defer func() { t.Logf("the rest in %s", time.Since(t0).Round(time.Millisecond)) }()
	standby, err := pgxpool.New(ctx, sb.DSN(src.Name, false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(standby.Close)
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: -4_000_000_000_000_000_000}, {Lo: 2_000_000_000_000_000_000, Hi: 6_000_000_000_000_000_000}}
	spec := tableset.Spec{Name: "users", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}
	srcSet := introspect(t, src, spec)
	dstSet, err := tableset.Introspect(ctx, dst.Pool, spec, "target")
	if err != nil {
		t.Fatal(err)
	}

	var writes atomic.Int64
	stop := liveWriters(t, ctx, src, &writes)
	time.Sleep(200 * time.Millisecond)

	names, l0 := slotOf(t, ctx, src, "verifystandby", dstSet, ranges)
	st, err := backfill.Copy(ctx, standby, dst.Pool, backfill.Options{Move: "verifystandby", Set: srcSet, Ranges: ranges, ChunkRows: 2000,
		Standby: &backfill.Standby{Name: "standby", Floor: l0}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %d rows from the standby (%d chunk reads cancelled by recovery conflicts)", st.Rows, st.RecoveryConflicts)
	stream := runStream(t, ctx, src, dst, "verifystandby", names, l0, dstSet, ranges)

	holder := &loggingHolder{t: t, s: stream}
	opts := Options{Set: srcSet, Ranges: ranges, Holder: holder, ChunkRows: 1500, Parallel: 2, BisectRows: 200, Primary: src.Pool}
	var last string
	for run := range 2 {
		before := writes.Load()
		rep, err := Run(ctx, standby, dst.Pool, opts)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		during := writes.Load() - before
		if !rep.OK() {
			t.Fatalf("run %d at %s: %d false mismatches (%d writes during the run): %+v", run, rep.LSN, rep.Mismatches(), during, rep.Tables[0].AllKeys())
		}
		if rep.LSN == "" || rep.LSN == last || rep.Rows < 5000 || during == 0 {
			t.Fatalf("run %d: LSN %q (previous %q), %d rows, %d writes meanwhile", run, rep.LSN, last, rep.Rows, during)
		}
		t.Logf("run %d from the standby at %s: %d rows, 0 mismatches, %d source writes meanwhile, %v", run, rep.LSN, rep.Rows, during, rep.Duration.Round(time.Millisecond))
		last = rep.LSN
	}

	stop()
	// The stream brings the writers' last changes: the target ends equal.
	deadline := time.Now().Add(60 * time.Second)
	for !rowsEqual(t, src, dst, ranges) {
		if time.Now().After(deadline) {
			t.Fatalf("60 s after %d writes stopped, the target's moving rows still differ from the primary's", writes.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after %d writes, the target holds exactly the primary's moving rows", writes.Load())

	intruder := inRange(t, src, ranges, 900_000_000, 900_100_000, true)
	dst.Exec(t, "INSERT INTO users VALUES ($1, 'intruder', 0, 'x')", intruder)
	rep, err := Run(ctx, standby, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	keys := rep.Tables[0].AllKeys()
	if rep.Mismatches() != 1 || keys[0].Kind != Extra || keys[0].Key[0] != fmt.Sprint(intruder) {
		t.Fatalf("intruder row %d: %d mismatches %+v", intruder, rep.Mismatches(), keys)
	}
	if _, err := Run(ctx, standby, dst.Pool, Options{Set: srcSet, Ranges: ranges, Primary: src.Pool, Recheck: true, Holder: stream}); err == nil {
		t.Fatal("a re-check from a standby was accepted")
	}
}

// rowsEqual compares the moving rows of both sides, row by row.
func rowsEqual(t *testing.T, a, b *pgtest.DB, ranges []ring.Range) bool {
	t.Helper()
	q := `SELECT coalesce(string_agg(u::text, '|' ORDER BY id), '') FROM users u WHERE ` + ring.Predicate("hashint8extended(id, 0)", ranges)
	var x, y string
	if err := a.Pool.QueryRow(context.Background(), q).Scan(&x); err != nil {
		t.Fatal(err)
	}
	if err := b.Pool.QueryRow(context.Background(), q).Scan(&y); err != nil {
		t.Fatal(err)
	}
	return x == y
}
