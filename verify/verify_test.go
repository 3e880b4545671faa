package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/internal/promtest"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

const (
	usersSrc = `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, name text, balance bigint NOT NULL DEFAULT 0,
		payload text, score double precision, updated_at timestamptz NOT NULL DEFAULT now())`
	// The target's physical column order differs: columns are compared by name.
	usersDst = `CREATE TABLE users (name text, balance bigint NOT NULL DEFAULT 0, id bigint PRIMARY KEY, payload text,
		updated_at timestamptz NOT NULL DEFAULT now(), score double precision, email text NOT NULL)`
	usersFill = `INSERT INTO users (id, email, name, balance, payload, score, updated_at)
		SELECT g, 'u' || g || '@example.com', 'name ' || g, g % 1000, md5(g::text), g / 7.0,
		       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
		FROM generate_series($1::bigint, $2::bigint) g`
	ordersDDL  = `CREATE TABLE orders (user_id bigint NOT NULL, id bigint NOT NULL, total numeric(12,2), note text, PRIMARY KEY (user_id, id))`
	ordersFill = `INSERT INTO orders SELECT g % 5000, g, (g % 997) / 3.0, CASE WHEN g % 3 = 0 THEN NULL ELSE 'n' || g END FROM generate_series(1, $1::bigint) g`
)

var usersSpec = tableset.Spec{Name: "users", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}

func introspect(t *testing.T, db *pgtest.DB, spec tableset.Spec) tableset.Set {
	t.Helper()
	set, err := tableset.Introspect(context.Background(), db.Pool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// inRange returns the first id in [from, to] whose token lies in (or, with
// in=false, outside) the ranges.
func inRange(t *testing.T, db *pgtest.DB, ranges []ring.Range, from, to int64, in bool) int64 {
	t.Helper()
	pred := ring.Predicate("hashint8extended(g, 0)", ranges)
	if !in {
		pred = "NOT " + pred
	}
	return db.QueryInt64(t, "SELECT min(g) FROM generate_series($1::bigint, $2::bigint) g WHERE "+pred, from, to)
}

func TestFaultsAreFoundAndNamed(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersDst)
	src.Exec(t, ordersDDL)
	dst.Exec(t, ordersDDL)
	const n = 100_000
	src.Exec(t, usersFill, 1, n)
	dst.Exec(t, usersFill, 1, n)
	src.Exec(t, ordersFill, 20_000)
	dst.Exec(t, ordersFill, 20_000)
	src.Exec(t, "ANALYZE")

	ranges := []ring.Range{{Lo: ring.MinToken, Hi: -3_000_000_000_000_000_000}, {Lo: 0, Hi: 4_000_000_000_000_000_000}}
	missing := inRange(t, src, ranges, 1, n, true)
	changed := inRange(t, src, ranges, n/2, n, true)
	extra := inRange(t, src, ranges, n+1, 2*n, true)
	outside := inRange(t, src, ranges, 1, n, false)
	dst.Exec(t, "DELETE FROM users WHERE id = $1", missing)
	dst.Exec(t, "UPDATE users SET name = 'changed' WHERE id = $1", changed)
	dst.Exec(t, usersFill, extra, extra)
	// Rows outside the moving ranges are not the move's business.
	dst.Exec(t, "DELETE FROM users WHERE id = $1", outside)
	outsideExtra := inRange(t, src, ranges, 2*n+1, 3*n, false)
	dst.Exec(t, usersFill, outsideExtra, outsideExtra)
	// orders: composite primary key, the shard key first; NULL vs value.
	orderUser := inRange(t, src, ranges, 0, 4999, true)
	orderID := src.QueryInt64(t, "SELECT min(id) FROM orders WHERE user_id = $1 AND note IS NULL", orderUser)
	dst.Exec(t, "UPDATE orders SET note = '' WHERE user_id = $1 AND id = $2", orderUser, orderID)

	spec := tableset.Spec{Name: "users", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"}}}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	t0 := time.Now()
	rep, err := Run(ctx, src.Pool, dst.Pool, Options{Set: introspect(t, src, spec), Ranges: ranges, ChunkRows: 8000, Parallel: 2, Metrics: m})
	t.Logf("verify took %v", time.Since(t0))
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Mismatches() != 4 {
		t.Fatalf("want 4 mismatches, got %d: %+v %+v", rep.Mismatches(), rep.Tables[0].AllKeys(), rep.Tables[1].AllKeys())
	}
	users, orders := rep.Tables[0], rep.Tables[1]
	got := users.AllKeys()
	slices.SortFunc(got, func(a, b Mismatch) int { return strings.Compare(string(a.Kind), string(b.Kind)) })
	want := []struct {
		kind Kind
		key  int64
	}{{Different, changed}, {Extra, extra}, {Missing, missing}}
	if len(got) != len(want) {
		t.Fatalf("users mismatches: got %+v, want %+v", got, want)
	}
	for i, w := range want {
		if got[i].Kind != w.kind || !slices.Equal(got[i].Key, []string{fmt.Sprint(w.key)}) || !ring.ContainsAny(ranges, got[i].Token) || !got[i].Range.Contains(got[i].Token) {
			t.Errorf("users mismatch %d: got %+v, want %s id=%d", i, got[i], w.kind, w.key)
		}
	}
	ok := orders.AllKeys()
	if len(ok) != 1 || ok[0].Kind != Different || !slices.Equal(ok[0].Key, []string{fmt.Sprint(orderUser), fmt.Sprint(orderID)}) {
		t.Errorf("orders mismatches: got %+v, want different (%d, %d)", ok, orderUser, orderID)
	}

	// Counts: every moving row of the source was compared, per range.
	if len(users.Chunks) < 5 {
		t.Errorf("users: %d chunks, want several at 8000 rows per chunk", len(users.Chunks))
	}
	for i, r := range ring.Normalize(ranges) {
		wantRows := src.QueryInt64(t, "SELECT count(*) FROM users WHERE "+ring.Predicate("hashint8extended(id, 0)", []ring.Range{r}))
		rr := users.Ranges[i]
		if rr.SourceRows != wantRows {
			t.Errorf("range %s: source rows %d, want %d", r, rr.SourceRows, wantRows)
		}
		if rr.Rows != rr.Matches+rr.Mismatches {
			t.Errorf("range %s: rows %d != matches %d + mismatches %d", r, rr.Rows, rr.Matches, rr.Mismatches)
		}
	}
	if got := promtest.Counter(t, reg, "reshard_verify_mismatches_total", "different"); got != 2 {
		t.Errorf("metric mismatches{different} = %v, want 2", got)
	}
	if got := promtest.Counter(t, reg, "reshard_verify_rows_total", "source"); got < n/3 {
		t.Errorf("metric rows{source} = %v", got)
	}

	var buf bytes.Buffer
	if err := rep.Table(&buf); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"MISMATCH", "missing", fmt.Sprintf("(%d)", missing), "extra", "different"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, buf.String())
		}
	}
	j, err := rep.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(j, &back); err != nil || back.Mismatches() != 4 {
		t.Errorf("JSON round trip: %v, %d mismatches", err, back.Mismatches())
	}

	// Repaired, the same comparison passes.
	dst.Exec(t, "DELETE FROM users WHERE id = $1", extra)
	dst.Exec(t, usersFill, missing, missing)
	dst.Exec(t, usersFill+" ON CONFLICT (id) DO UPDATE SET name = excluded.name", changed, changed)
	dst.Exec(t, "UPDATE orders SET note = NULL WHERE user_id = $1 AND id = $2", orderUser, orderID)
	rep, err = Run(ctx, src.Pool, dst.Pool, Options{Set: introspect(t, src, spec), Ranges: ranges, ChunkRows: 8000})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("after repair: %d mismatches: %+v", rep.Mismatches(), rep.Tables[0].AllKeys())
	}
}

func TestEmptyTargetListsEveryRow(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersSrc)
	src.Exec(t, usersFill, 1, 3000)
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	rep, err := Run(ctx, src.Pool, dst.Pool, Options{Set: introspect(t, src, usersSpec), Ranges: ranges, BisectRows: 100, MaxSampleKeys: 5})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Tables[0].Chunks[0]
	if rep.Mismatches() != 3000 || c.Rows != 3000 || c.Matches != 0 || len(c.Keys) != 5 || c.Keys[0].Kind != Missing {
		t.Fatalf("got %d mismatches, chunk %+v", rep.Mismatches(), c)
	}
}

func TestRestartContinuesWithTheNextChunk(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersSrc)
	const n = 40_000
	src.Exec(t, usersFill, 1, n)
	dst.Exec(t, usersFill, 1, n)
	src.Exec(t, "ANALYZE users")
	ranges := []ring.Range{{Lo: -5_000_000_000_000_000_000, Hi: 8_000_000_000_000_000_000}}
	opts := Options{RunID: "move-7", Set: introspect(t, src, usersSpec), Ranges: ranges, ChunkRows: 3000, Parallel: 1}

	// First attempt: stopped (as by a crash) after three chunks.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var first []int
	opts.Progress = func(c ChunkReport) {
		if first = append(first, c.Index); len(first) == 3 {
			cancel()
		}
	}
	if _, err := Run(ctx, src.Pool, dst.Pool, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted attempt: %v", err)
	}
	// Last chunk first (compareAll).
	last := int(dst.QueryInt64(t, `SELECT count(*) FROM reshard.verify_chunk WHERE run_id = 'move-7'`)) - 1
	if !slices.Equal(first, []int{last, last - 1, last - 2}) {
		t.Fatalf("first attempt compared %v, want the last three of %d chunks, last first", first, last+1)
	}
	var stamps []time.Time
	rows, err := dst.Pool.Query(context.Background(), `SELECT verified_at FROM reshard.verify_chunk WHERE run_id = 'move-7' AND ok ORDER BY chunk`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var ts time.Time
		if err := rows.Scan(&ts); err != nil {
			t.Fatal(err)
		}
		stamps = append(stamps, ts)
	}
	if len(stamps) != 3 {
		t.Fatalf("%d chunks recorded verified, want 3", len(stamps))
	}
	total := dst.QueryInt64(t, `SELECT count(*) FROM reshard.verify_chunk WHERE run_id = 'move-7'`)
	if total < 8 {
		t.Fatalf("plan has %d chunks, want about 10", total)
	}

	// Second attempt, new snapshot: compares only the chunks not yet done.
	// More rows arrive meanwhile on both sides, below every key planned;
	// the plan's open first chunk covers them.
	src.Exec(t, usersFill, -1999, 0)
	dst.Exec(t, usersFill, -1999, 0)
	var mu sync.Mutex
	var second []int
	opts.Progress = func(c ChunkReport) { mu.Lock(); second = append(second, c.Index); mu.Unlock() }
	opts.Parallel = 2
	rep, err := Run(context.Background(), src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(second)
	var want []int
	for i := 0; i < int(total)-3; i++ {
		want = append(want, i)
	}
	if !slices.Equal(second, want) {
		t.Fatalf("second attempt compared chunks %v, want %v", second, want)
	}
	if !rep.OK() {
		t.Fatalf("mismatches: %+v", rep.Tables[0].AllKeys())
	}
	var sum int64
	for i, c := range rep.Tables[0].Chunks {
		done := i >= int(total)-3
		if c.Resumed != done {
			t.Errorf("chunk %d resumed=%v", i, c.Resumed)
		}
		if done && !c.VerifiedAt.Equal(stamps[i-int(total)+3]) {
			t.Errorf("chunk %d verified at %v, recorded %v", i, c.VerifiedAt, stamps[i-int(total)+3])
		}
		sum += c.SourceRows
	}
	if want := src.QueryInt64(t, "SELECT count(*) FROM users WHERE "+ring.Predicate("hashint8extended(id, 0)", ranges)); sum != want {
		t.Errorf("chunks cover %d rows, want %d", sum, want)
	}
	var again int64
	again = dst.QueryInt64(t, `SELECT count(*) FROM reshard.verify_chunk WHERE run_id = 'move-7' AND ok AND chunk >= $2 AND verified_at = ANY($1)`, stamps, total-3)
	if again != 3 {
		t.Errorf("finished chunks were re-recorded: %d of 3 keep their stamps", again)
	}

	// A third attempt has nothing left to compare and opens no snapshot.
	opts.Progress = func(c ChunkReport) { t.Errorf("chunk %d compared again", c.Index) }
	if rep, err = Run(context.Background(), src.Pool, dst.Pool, opts); err != nil || !rep.OK() {
		t.Fatalf("third attempt: %v", err)
	}

	// The same run id for other ranges is refused.
	opts.Ranges = []ring.Range{{Lo: 0, Hi: 1}}
	if _, err := Run(context.Background(), src.Pool, dst.Pool, opts); err == nil || !strings.Contains(err.Error(), "new run id") {
		t.Fatalf("other ranges under the same run id: %v", err)
	}
}

func TestThrottle(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersSrc)
	src.Exec(t, usersFill, 1, 4000)
	dst.Exec(t, usersFill, 1, 4000)
	src.Exec(t, "ANALYZE users")
	start := time.Now()
	rep, err := Run(context.Background(), src.Pool, dst.Pool, Options{Set: introspect(t, src, usersSpec),
		Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, ChunkRows: 1000, RowsPerSecond: 2000, Parallel: 1})
	if err != nil || !rep.OK() {
		t.Fatalf("%v", err)
	}
	// The limiter's burst is one second's worth: 4000 rows at 2000/s take ≥ 1 s.
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("throttled run took %v", d)
	}
}

// countingThrottle counts the rows it is asked to let through.
type countingThrottle struct{ rows atomic.Int64 }

func (c *countingThrottle) Wait(_ context.Context, rows, _ int) (time.Duration, error) {
	c.rows.Add(int64(rows))
	return 0, nil
}

// A Throttle given (the adaptive throttle's) is waited on for every row read,
// instead of RowsPerSecond's own limiter.
func TestThrottleFromOutside(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersSrc)
	src.Exec(t, usersFill, 1, 4000)
	dst.Exec(t, usersFill, 1, 4000)
	th := &countingThrottle{}
	start := time.Now()
	rep, err := Run(context.Background(), src.Pool, dst.Pool, Options{Set: introspect(t, src, usersSpec),
		Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, ChunkRows: 1000, RowsPerSecond: 100, Throttle: th, Parallel: 1})
	if err != nil || !rep.OK() {
		t.Fatalf("%v", err)
	}
	if n := th.rows.Load(); n != 4000 {
		t.Errorf("the throttle was asked for %d rows, want 4000", n)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("RowsPerSecond (100/s) paced the run as well: %s", d)
	}
}

// fakeApplier stands in for the CDC applier at the edges HoldAt and Release
// define: at HoldAt it brings the target to the source snapshot (applying a
// change committed before it) while the source moves on; after Release the
// target moves on too. Neither later write may be seen.
type fakeApplier struct {
	t        *testing.T
	src, dst *pgtest.DB
	held     []string
	heldLSN  pglogrepl.LSN
	released int
}

func (f *fakeApplier) HoldAt(ctx context.Context, lsn pglogrepl.LSN) error {
	f.held = append(f.held, lsn.String())
	f.heldLSN = lsn
	// Written after the source snapshot: invisible to verify on both sides.
	f.src.Exec(f.t, "UPDATE users SET name = 'after the snapshot' WHERE id = 2")
	f.src.Exec(f.t, usersFill, 900_001, 900_001)
	// Applied up to the LSN: the change committed before it reaches the target.
	f.dst.Exec(f.t, "UPDATE users SET name = 'before the snapshot' WHERE id = 1")
	return nil
}

func (f *fakeApplier) Release() {
	f.released++
	f.dst.Exec(f.t, "UPDATE users SET name = 'after the snapshot' WHERE id = 2")
	f.dst.Exec(f.t, usersFill, 900_002, 900_002)
}

func TestHolderSeesBothSidesAtTheSlotLSN(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersSrc)
	src.Exec(t, usersFill, 1, 5000)
	dst.Exec(t, usersFill, 1, 5000)
	src.Exec(t, "UPDATE users SET name = 'before the snapshot' WHERE id = 1")
	before := src.QueryInt64(t, "SELECT pg_current_wal_lsn() - '0/0'")
	f := &fakeApplier{t: t, src: src, dst: dst}
	rep, err := Run(context.Background(), src.Pool, dst.Pool, Options{Set: introspect(t, src, usersSpec),
		Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, ChunkRows: 1000, Parallel: 3, Holder: f})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("mismatches: %+v", rep.Tables[0].AllKeys())
	}
	if len(f.held) != 1 || f.released != 1 || rep.LSN != (f.heldLSN+1).String() {
		t.Fatalf("held at %v, released %d times, report LSN %s", f.held, f.released, rep.LSN)
	}
	lsn, _ := pglogrepl.ParseLSN(rep.LSN)
	if int64(lsn) < before {
		t.Errorf("snapshot LSN %s precedes writes already committed (%d)", lsn, before)
	}
	if n := src.QueryInt64(t, "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Errorf("%d replication slots left on the source", n)
	}
	// Without the holder's discipline the same data differs: the check can fail.
	rep, err = Run(context.Background(), src.Pool, dst.Pool, Options{Set: introspect(t, src, usersSpec),
		Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}})
	if err != nil || rep.Mismatches() != 2 {
		t.Fatalf("after the writes: %v, %d mismatches, want 900001 missing and 900002 extra", err, rep.Mismatches())
	}
}

// A verify run planned while the ranges were empty, resumed after rows
// arrived on the source, compares nothing: it must not pass.
func TestNothingComparedDoesNotPass(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersSrc)
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	opts := Options{RunID: "empty-then-not", Set: introspect(t, src, usersSpec), Ranges: ranges}
	rep, err := Run(ctx, src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Rows != 0 {
		t.Fatalf("verify of two empty tables: ok %v, %d rows, problem %q", rep.OK(), rep.Rows, rep.Problem)
	}
	src.Exec(t, usersFill, 1, 100)
	dst.Exec(t, usersFill, 1, 100)
	rep, err = Run(ctx, src.Pool, dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed verify: %d rows compared, %d reused, problem %q", rep.Rows, rep.ReusedRows, rep.Problem)
	if rep.Rows+rep.ReusedRows == 0 && (rep.OK() || !strings.Contains(rep.Problem, "compared no row")) {
		t.Fatalf("a resumed verify that compared nothing of 100 source rows passed: ok %v, problem %q", rep.OK(), rep.Problem)
	}
	if rep.Rows+rep.ReusedRows > 0 && rep.Rows+rep.ReusedRows != 100 {
		t.Fatalf("compared %d + %d reused rows of 100", rep.Rows, rep.ReusedRows)
	}
}

// TestChunkReadsHaveNoParallelWorkers: verify's sessions plan a chunk's
// checksum without parallel workers, whatever the server or the caller's
// pool would allow — verify's own workers already keep the cores busy, and
// a chunk's parallel workers spent as much CPU again as the chunk itself.
func TestChunkReadsHaveNoParallelWorkers(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE wide (id bigint PRIMARY KEY, v text);
		INSERT INTO wide SELECT g, md5(g::text) FROM generate_series(1, 20000) g; ANALYZE wide`)
	// A pool that makes every scan parallel when it can.
	pool := db.PoolWith(t, map[string]string{"max_parallel_workers_per_gather": "4", "parallel_setup_cost": "0", "parallel_tuple_cost": "0",
		"min_parallel_table_scan_size": "0", "min_parallel_index_scan_size": "0"})
	set, err := tableset.Introspect(ctx, db.Pool, tableset.Spec{Name: "wide", Tables: []tableset.TableSpec{{Table: "wide", KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	q, err := newTableSQL(set.Tables[0], []ring.Range{{Lo: ring.MinToken, Hi: 0}})
	if err != nil {
		t.Fatal(err)
	}
	plan := func(tx pgx.Tx) string { return explainSums(ctx, t, tx, q, nil, nil, "EXPLAIN ") }
	// The pool itself plans a parallel scan: the check below can fail.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if p := plan(tx); !strings.Contains(p, "Workers Planned") {
		t.Fatalf("the caller's pool plans no parallel scan, so this test proves nothing:\n%s", p)
	}
	r, err := begin(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if p := plan(r.tx); strings.Contains(p, "Workers Planned") {
		t.Errorf("verify's session plans a chunk with parallel workers:\n%s", p)
	}
}
