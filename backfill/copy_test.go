package backfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/promtest"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

const ddl = `
	CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, name text, balance numeric(12,2), tags text[],
		created_at timestamptz NOT NULL DEFAULT now(), n int GENERATED ALWAYS AS (length(email)) STORED);
	CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint NOT NULL, total numeric(10,2), "Note col" jsonb);
	CREATE TABLE events (user_id bigint, k text, v bytea, PRIMARY KEY (user_id, k))`

var spec = tableset.Spec{Name: "app", Tables: []tableset.TableSpec{
	{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"}, {Table: "events", KeyColumn: "user_id"}}}

// pkOf is each test table's primary key, for ordered dumps.
var pkOf = map[string]string{"users": "id", "orders": "id", "events": "user_id, k"}

type fixture struct {
	src, dst *pgtest.DB
	set      tableset.Set
	ranges   []ring.Range
	tokens   []int64 // sorted tokens of the source's users
}

// newFixture loads users, orders (whose primary key lacks the shard key) and
// events (a composite text key with quotes and backslashes) on the source,
// and gives the target rows of its own outside the moving ranges.
func newFixture(t *testing.T, users int) *fixture {
	t.Helper()
	f := &fixture{src: pgtest.NewDB(t, 0), dst: pgtest.NewDB(t, 1)}
	f.src.Exec(t, ddl)
	f.dst.Exec(t, ddl)
	f.src.Exec(t, strings.ReplaceAll(`
		INSERT INTO users (id, email, name, balance, tags)
			SELECT g, 'u'||g||'@example.com', CASE WHEN g % 7 = 0 THEN NULL ELSE E'name\t'||g||' O''Brien \\ "q"' END,
			       g * 1.25, ARRAY['a', 'b'||g] FROM generate_series(1, :n) g;
		INSERT INTO orders SELECT g, g % :n + 1, g % 1000, jsonb_build_object('g', g) FROM generate_series(1, 2 * :n) g;
		INSERT INTO events SELECT g % :n + 1, E'k''\\'||g, decode(md5(g::text), 'hex') FROM generate_series(1, :n) g;
		CREATE INDEX ON orders ((hashint8extended(user_id, 0)));
		ANALYZE`, ":n", strconv.Itoa(users)))
	rows, err := f.src.Pool.Query(context.Background(), `SELECT hashint8extended(id, 0) FROM users ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		f.tokens = append(f.tokens, tok)
	}
	n := len(f.tokens)
	// The wrap, as two ranges, both edges of the space, a range whose bounds
	// are tokens of real keys, and an overlapping duplicate to normalize away.
	f.ranges = []ring.Range{
		{Lo: f.tokens[n*9/10], Hi: ring.MaxToken},
		{Lo: f.tokens[n/3], Hi: f.tokens[n/2]},
		{Lo: ring.MinToken, Hi: f.tokens[n/10]},
		{Lo: f.tokens[n/3+5], Hi: f.tokens[n/3+20]},
	}
	if f.set, err = tableset.Introspect(context.Background(), f.src.Pool, spec, "source"); err != nil {
		t.Fatal(err)
	}
	// The target's own rows: keys outside the moving ranges.
	f.dst.Exec(t, `INSERT INTO users (id, email) SELECT g, 'own'||g FROM generate_series(1000001, 1000300) g WHERE NOT `+
		ring.Predicate("hashint8extended(g, 0)", f.ranges))
	f.dst.Exec(t, `INSERT INTO orders SELECT g, g, 1 FROM generate_series(1000001, 1000300) g WHERE NOT `+
		ring.Predicate("hashint8extended(g, 0)", f.ranges))
	return f
}

func (f *fixture) opts(move string) Options {
	return Options{Move: move, Set: f.set, Ranges: f.ranges, ChunkRows: 100, Parallel: 3}
}

// dump renders a table's rows (those in ranges, or all when ranges is nil)
// ordered by primary key.
func dump(t *testing.T, db *pgtest.DB, table string, ranges []ring.Range) []string {
	t.Helper()
	where := "true"
	if ranges != nil {
		key := "id"
		if table != "users" {
			key = "user_id"
		}
		where = ring.Predicate("hashint8extended("+key+", 0)", ranges)
	}
	rows, err := db.Pool.Query(context.Background(), `SELECT r::text FROM `+table+` r WHERE `+where+` ORDER BY `+pkOf[table])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// expectCopied checks that the target's rows in the ranges equal the source's
// row for row, that the target holds nothing else but its own rows, and that
// those are untouched.
func (f *fixture) expectCopied(t *testing.T) {
	t.Helper()
	for _, table := range []string{"users", "orders", "events"} {
		want, got := dump(t, f.src, table, f.ranges), dump(t, f.dst, table, f.ranges)
		if len(want) == 0 {
			t.Fatalf("%s: no source rows in the ranges", table)
		}
		if !slices.Equal(want, got) {
			t.Fatalf("%s: target has %d rows in the ranges, source %d (or they differ)", table, len(got), len(want))
		}
	}
	// Nothing outside the ranges was copied: the rest of the target is its own rows.
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE NOT `+ring.Predicate("hashint8extended(id, 0)", f.ranges)); n != f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id > 1000000`) {
		t.Fatalf("users outside the ranges on the target: %d, not just its own rows", n)
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id > 1000000 AND email NOT LIKE 'own%'`); n != 0 {
		t.Fatalf("%d of the target's own rows were changed", n)
	}
	// Cross-check the SQL predicate with the Go side: every user on the target
	// has a token the ranges contain, and their number is the source's in Go.
	var inGo int
	for _, tok := range f.tokens {
		if ring.ContainsAny(f.ranges, tok) {
			inGo++
		}
	}
	rows, err := f.dst.Pool.Query(context.Background(), `SELECT hashint8extended(id, 0) FROM users WHERE id <= 1000000`)
	if err != nil {
		t.Fatal(err)
	}
	var onTarget int
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if !ring.ContainsAny(f.ranges, tok) {
			t.Fatalf("user with token %d copied, outside the ranges", tok)
		}
		onTarget++
	}
	if onTarget != inGo {
		t.Fatalf("target has %d users, the ranges hold %d", onTarget, inGo)
	}
}

// expectedRows is the number of source rows the move copies.
func (f *fixture) expectedRows(t *testing.T) int64 {
	var n int64
	for _, table := range []string{"users", "orders", "events"} {
		n += int64(len(dump(t, f.src, table, f.ranges)))
	}
	return n
}

// checkpointRows sums the rows recorded by a move's checkpoints: it equals the
// rows to copy only if no chunk was committed twice.
func checkpointRows(t *testing.T, f *fixture, move string) (rows int64, done, total int) {
	t.Helper()
	cps, err := Checkpoints(context.Background(), f.dst.Pool, move)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		rows += c.Rows
		if c.Done {
			done++
		}
	}
	return rows, done, len(cps)
}

func TestCopyRangesRowForRow(t *testing.T) {
	f := newFixture(t, 2000)
	ctx := context.Background()
	// The range bounds are tokens of real users: lower bounds exclusive, upper inclusive.
	n := len(f.tokens)
	reg := prometheus.NewRegistry()
	opts := f.opts("m1")
	opts.Split = 4 // sub-ranges: a table paged by primary key still reads all of them in one unit
	opts.Metrics = NewMetrics(reg)
	st, err := Copy(ctx, f.src.Pool, f.dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.expectCopied(t)
	for _, c := range []struct {
		tok  int64
		want int64
	}{{f.tokens[n/10], 1}, {f.tokens[n/10+1], 0}, {f.tokens[n/3], 0}, {f.tokens[n/3+1], 1}, {f.tokens[n/2], 1}, {f.tokens[n/2+1], 0}, {f.tokens[n*9/10], 0}, {f.tokens[n*9/10+1], 1}} {
		if got := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE hashint8extended(id, 0) = $1`, c.tok); got != c.want {
			t.Errorf("user with token %d: %d rows on the target, want %d", c.tok, got, c.want)
		}
	}
	want := f.expectedRows(t)
	// The ranges cover over 1/16 of the space: every table, orders with its
	// token index too, pages all of them by primary key in one scan.
	if st.Rows != want || st.Units != 3 || st.Chunks < want/100 {
		t.Fatalf("stats %+v, want %d rows in 3 units", st, want)
	}
	if rows, done, total := checkpointRows(t, f, "m1"); rows != want || done != total || total != 3 {
		t.Fatalf("checkpoints: %d rows, %d of %d done", rows, done, total)
	}
	if got := promtest.Counter(t, reg, "reshard_backfill_rows_total", "public.users"); got != float64(len(dump(t, f.src, "users", f.ranges))) {
		t.Fatalf("reshard_backfill_rows_total{table=users} = %g", got)
	}
	cps, _ := Checkpoints(ctx, f.dst.Pool, "m1")
	for _, c := range cps {
		if c.Order != "pk" {
			t.Fatalf("%s paged by %s, want pk", c.Table, c.Order)
		}
	}
	// A rerun finds every unit done and copies nothing.
	st, err = Copy(ctx, f.src.Pool, f.dst.Pool, opts)
	if err != nil || st.Rows != 0 || st.Skipped != 3 {
		t.Fatalf("rerun: %+v %v", st, err)
	}
	// A new move over the same ranges re-copies harmlessly (upserts).
	f.src.Exec(t, `UPDATE users SET name = 'changed' WHERE id % 5 = 0`)
	st, err = Copy(ctx, f.src.Pool, f.dst.Pool, f.opts("m2"))
	if err != nil {
		t.Fatal(err)
	}
	if st.FastChunks == st.Chunks {
		t.Fatalf("re-copy went through the COPY fast path only: %+v", st)
	}
	f.expectCopied(t)

	// Rollback: delete the copied rows on the target, throttled; its own rows stay.
	deleted, err := DeleteRanges(ctx, f.dst.Pool, f.set, f.ranges, 100, NewThrottle(1e6, 0))
	if err != nil {
		t.Fatal(err)
	}
	if deleted != want {
		t.Fatalf("deleted %d rows, copied %d", deleted, want)
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id <= 1000000`) + f.dst.QueryInt64(t, `SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d copied rows left after DeleteRanges", n)
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id > 1000000`); n == 0 {
		t.Fatal("DeleteRanges removed the target's own rows")
	}
}

func TestCopyResumesAfterCancel(t *testing.T) {
	f := newFixture(t, 2000)
	want := f.expectedRows(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := f.opts("cancel")
	var chunks atomic.Int64
	opts.Progress = func(p Progress) {
		if chunks.Add(1) == 8 {
			cancel()
		}
	}
	if _, err := Copy(ctx, f.src.Pool, f.dst.Pool, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled copy returned %v", err)
	}
	// A COMMIT the cancel interrupted may still complete on the server a
	// moment after Copy returned: read the checkpoints once they are still.
	before, doneBefore, unitsBefore := checkpointRows(t, f, "cancel")
	for i := 0; i < 20; i++ {
		time.Sleep(200 * time.Millisecond)
		b, d, u := checkpointRows(t, f, "cancel")
		if b == before && d == doneBefore && u == unitsBefore {
			break
		}
		before, doneBefore, unitsBefore = b, d, u
	}
	if before == 0 || before >= want {
		t.Fatalf("after cancel the checkpoints hold %d of %d rows", before, want)
	}
	opts.Progress = nil
	st, err := Copy(context.Background(), f.src.Pool, f.dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing committed before is copied again. A unit cut short by the
	// cancel (a checkpoint not done) is resumed; whether one exists depends
	// on where the cancel fell, so it is required only when there is one.
	if st.Rows != want-before || (doneBefore < unitsBefore && st.Resumed == 0) {
		t.Fatalf("rerun copied %d rows (resumed %d units; %d of %d checkpointed units were done); %d were committed before, %d to copy",
			st.Rows, st.Resumed, doneBefore, unitsBefore, before, want)
	}
	if rows, done, total := checkpointRows(t, f, "cancel"); rows != want || done != total {
		t.Fatalf("checkpoints: %d rows of %d, %d of %d units done", rows, want, done, total)
	}
	f.expectCopied(t)
}

// terminate kills every other session of db's database.
func terminate(t *testing.T, db *pgtest.DB) {
	t.Helper()
	db.Exec(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
}

// noPingPool is a pool of dsn that hands out its connections unchecked.
func noPingPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestCopyResumesAfterKilledConnections(t *testing.T) {
	f := newFixture(t, 2000)
	want := f.expectedRows(t)
	ctx := context.Background()
	opts := f.opts("kill")
	opts.Retries = -1
	var chunks atomic.Int64
	opts.Progress = func(p Progress) {
		if chunks.Add(1) == 6 {
			terminate(t, f.dst)
		}
	}
	_, err := Copy(ctx, f.src.Pool, f.dst.Pool, opts)
	if err == nil || !pgerr.Retryable(err) {
		t.Fatalf("copy with its target connections killed returned %v (retryable %t)", err, pgerr.Retryable(err))
	}
	// A crashed worker would start with new connections; so do the test's checks.
	f.src.Pool.Reset()
	f.dst.Pool.Reset()
	before, _, _ := checkpointRows(t, f, "kill")
	if before == 0 || before >= want {
		t.Fatalf("after the kill the checkpoints hold %d of %d rows", before, want)
	}
	// The rerun retries by itself; its source and target sessions are
	// killed again mid-way and it resumes from the checkpoints. Its pools
	// never ping a connection they hand out, so a killed one fails the
	// chunk that gets it: the test pools ping one idle for over a second
	// and replaced the dead ones unseen when the kill was slow under load
	// (CI, 2026-12-04: the rerun made no retry).
	// Each killed connection left in a pool fails one attempt: up to the
	// pools' sizes of them, more than the default 3 retries a unit.
	chunks.Store(0)
	opts.Retries = 20
	opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	src, dst := noPingPool(t, f.src.DSN), noPingPool(t, f.dst.DSN)
	opts.Progress = func(p Progress) {
		if chunks.Add(1) == 5 {
			terminate(t, f.src)
			terminate(t, f.dst)
		}
	}
	st, err := Copy(ctx, src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A chunk whose commit landed but whose answer was lost to the kill is
	// not counted by this run (its retry finds it in the checkpoint): the
	// count may fall short by a chunk per retry, never exceed what was left.
	// The checkpoints and the rows (below) are the exact record.
	if st.Resumed == 0 || st.Retries == 0 || st.Rows > want-before || st.Rows < want-before-int64(st.Retries*opts.ChunkRows) {
		t.Fatalf("rerun: %+v; %d rows were committed before, %d to copy", st, before, want)
	}
	if rows, done, total := checkpointRows(t, f, "kill"); rows != want || done != total {
		t.Fatalf("checkpoints: %d rows of %d, %d of %d units done", rows, want, done, total)
	}
	f.expectCopied(t)
}

func TestCopyStopsOnCollision(t *testing.T) {
	f := newFixture(t, 500)
	ctx := context.Background()
	// Order 7 belongs to a user in the ranges on the source; the target has its
	// own order 7 for a user it owns (outside the ranges).
	f.src.Exec(t, `UPDATE orders SET user_id = (SELECT id FROM users WHERE `+ring.Predicate("hashint8extended(id, 0)", f.ranges)+` LIMIT 1) WHERE id = 7`)
	own := f.dst.QueryInt64(t, `SELECT min(user_id) FROM orders WHERE user_id > 1000000`)
	f.dst.Exec(t, `INSERT INTO orders VALUES (7, $1, 99.99, '{"mine": true}')`, own)
	_, err := Copy(ctx, f.src.Pool, f.dst.Pool, f.opts("collide"))
	var ce *CollisionError
	if !errors.As(err, &ce) {
		t.Fatalf("copy returned %v, want a collision", err)
	}
	if ce.Table != "public.orders" || ce.Key != "id=7" || !strings.Contains(err.Error(), "id=7") || pgerr.Retryable(err) {
		t.Fatalf("collision %+v: %v", ce, err)
	}
	var uid int64
	var total string
	if err := f.dst.Pool.QueryRow(ctx, `SELECT user_id, total::text FROM orders WHERE id = 7`).Scan(&uid, &total); err != nil || uid != own || total != "99.99" {
		t.Fatalf("the target's own row changed: user_id %d total %s (%v)", uid, total, err)
	}
	// Once the operator gives the target's row another key, the move resumes and completes.
	f.dst.Exec(t, `UPDATE orders SET id = 5000007 WHERE id = 7`)
	if _, err := Copy(ctx, f.src.Pool, f.dst.Pool, f.opts("collide")); err != nil {
		t.Fatal(err)
	}
	f.expectCopied(t)
}

// TestCopyStopsOnUniqueCollision: a unique index beyond the primary key
// (users.email), a moving user whose email a user the target owns already
// has: the copy stops, naming the constraint, the key and the value, not
// retryable, and the target's row is left as it was.
func TestCopyStopsOnUniqueCollision(t *testing.T) {
	f := newFixture(t, 500)
	ctx := context.Background()
	moving := f.src.QueryInt64(t, `SELECT min(id) FROM users WHERE `+ring.Predicate("hashint8extended(id, 0)", f.ranges))
	own := f.dst.QueryInt64(t, `SELECT min(id) FROM users`)
	f.dst.Exec(t, `CREATE UNIQUE INDEX users_email_key ON users (email)`)
	f.dst.Exec(t, `UPDATE users SET email = $2 WHERE id = $1`, own, fmt.Sprintf("u%d@example.com", moving))
	_, err := Copy(ctx, f.src.Pool, f.dst.Pool, f.opts("unique"))
	var ue *pgerr.UniqueError
	if !errors.As(err, &ue) || pgerr.Retryable(err) {
		t.Fatalf("copy returned %v, want a non-retryable unique collision", err)
	}
	want := fmt.Sprintf(`unique constraint "users_email_key" of public.users: Key (email)=(u%d@example.com) already exists on the target`, moving)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("copy error %q\nlacks %q", err, want)
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id = $1 AND email = $2`, own, fmt.Sprintf("u%d@example.com", moving)); n != 1 {
		t.Fatal("the target's own row changed")
	}
}

func TestCopyOverwritesStaleRowsInTheRanges(t *testing.T) {
	f := newFixture(t, 300)
	ctx := context.Background()
	// A leftover of an earlier attempt, inside the ranges, with other values.
	id := f.src.QueryInt64(t, `SELECT min(id) FROM orders WHERE `+ring.Predicate("hashint8extended(user_id, 0)", f.ranges))
	uid := f.src.QueryInt64(t, `SELECT user_id FROM orders WHERE id = $1`, id)
	f.dst.Exec(t, `INSERT INTO orders VALUES ($1, $2, 0, '{"stale": 1}')`, id, uid)
	if _, err := Copy(ctx, f.src.Pool, f.dst.Pool, f.opts("stale")); err != nil {
		t.Fatal(err)
	}
	f.expectCopied(t)
}

func TestThrottle(t *testing.T) {
	f := newFixture(t, 300)
	ctx := context.Background()
	opts := f.opts("throttle")
	opts.Set.Tables = opts.Set.Tables[:1] // users only
	opts.Parallel = 1
	opts.ChunkRows = 50
	opts.RowsPerSec = 200
	n := int64(len(dump(t, f.src, "users", f.ranges)))
	start := time.Now()
	st, err := Copy(ctx, f.src.Pool, f.dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The burst (a tenth of a second) passes at once; the rest at 200 rows/s.
	floor := time.Duration(float64(n-20)/200*0.9*1e9) * time.Nanosecond
	if el := time.Since(start); el < floor || el > floor*3+3*time.Second || st.Throttled < floor/2 {
		t.Fatalf("%d rows at 200 rows/s took %s (throttled %s), want about %s", n, el, st.Throttled, floor)
	}
	// Limits change while a copy runs: lifted after the first chunk (20
	// rows, a second at 20 rows/s), the copy waits for the throttle about
	// a second, not the n/20 s the limit would have cost it. (The limit was
	// lifted at 100 rows, and the copy's time held under 15 s: the whole
	// copy at 20 rows/s took less than that.)
	opts.Move = "throttle2"
	opts.RowsPerSec = 0
	opts.Throttle = NewThrottle(20, 0)
	opts.Progress = func(p Progress) {
		if p.Rows >= 20 {
			opts.Throttle.SetLimits(0, 1e9)
		}
	}
	st, err = Copy(ctx, f.src.Pool, f.dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if limited := time.Duration(float64(n) / 20 * 1e9); st.Throttled > limited/2 {
		t.Fatalf("lifting the limit did not speed the copy up: throttled %s of %d rows, %s at 20 rows/s", st.Throttled, n, limited)
	}
	if r, b := opts.Throttle.Limits(); r != 0 || b != 1e9 {
		t.Fatalf("limits %g %g", r, b)
	}
}

func TestPauseResumeAndPressure(t *testing.T) {
	f := newFixture(t, 300)
	ctx := context.Background()
	opts := f.opts("pause")
	opts.Pause = &Pauser{}
	opts.Pause.Pause()
	reg := prometheus.NewRegistry()
	opts.Metrics = NewMetrics(reg)
	var asked atomic.Int64
	opts.Pressure = func(context.Context) (time.Duration, error) {
		if asked.Add(1) <= 3 {
			return 100 * time.Millisecond, nil
		}
		return 0, nil
	}
	done := make(chan struct{})
	var (
		st  Stats
		err error
	)
	go func() {
		defer close(done)
		st, err = Copy(ctx, f.src.Pool, f.dst.Pool, opts)
	}()
	time.Sleep(700 * time.Millisecond)
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id <= 1000000`); n != 0 || !opts.Pause.Paused() {
		t.Fatalf("paused copy wrote %d rows", n)
	}
	if asked.Load() != 0 {
		t.Fatal("a paused copy asked for pressure")
	}
	opts.Pause.Resume()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused < 500*time.Millisecond || st.BackedOff < 300*time.Millisecond {
		t.Fatalf("stats %+v", st)
	}
	if got := promtest.Counter(t, reg, "reshard_backfill_throttled_seconds_total", "pressure"); got < 0.3 {
		t.Fatalf("throttled seconds for pressure: %g", got)
	}
	f.expectCopied(t)
}

func TestActiveSessions(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	ctx := context.Background()
	p := ActiveSessions(db.Pool, 0, 50*time.Millisecond)
	if d, err := p(ctx); err != nil || d != 0 {
		t.Fatalf("idle source: back off %s, %v", d, err)
	}
	busy := db.Conn(t)
	bctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		busy.Exec(bctx, `SELECT pg_sleep(3)`)
	}()
	// The connection is closed by the test's cleanup: stop using it first.
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(3 * time.Second)
	for {
		time.Sleep(1100 * time.Millisecond) // it asks at most once a second
		d, err := p(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d == 50*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a running pg_sleep did not count as pressure")
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestDeleteRangesWalksTheKey: the batches walk the primary key in its own
// order — an integer key, and a composite one — whatever the key columns
// are named, and delete every row of several ranges and nothing else.
func TestDeleteRangesWalksTheKey(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE kv (k bigint PRIMARY KEY, v text NOT NULL);
		INSERT INTO kv SELECT g, 'v' || g FROM generate_series(1, 3000) g;
		CREATE TABLE pairs (a int NOT NULL, k bigint NOT NULL, PRIMARY KEY (a, k));
		INSERT INTO pairs SELECT g % 7, g FROM generate_series(1, 3000) g;
		ANALYZE`)
	set, err := tableset.Introspect(context.Background(), db.Pool, tableset.Spec{Name: "kv", Tables: []tableset.TableSpec{
		{Table: "kv", KeyColumn: "k"}, {Table: "pairs", KeyColumn: "k"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: -6e18}, {Lo: -1e18, Hi: 1e18}, {Lo: 7e18, Hi: ring.MaxToken}}
	pred := ring.Predicate("hashint8extended(k, 0)", ranges)
	want := db.QueryInt64(t, "SELECT count(*) FROM kv WHERE "+pred) + db.QueryInt64(t, "SELECT count(*) FROM pairs WHERE "+pred)
	deleted, err := DeleteRanges(context.Background(), db.Pool, set, ranges, 37, nil)
	if err != nil {
		t.Fatal(err)
	}
	if deleted != want || want < 1000 {
		t.Fatalf("deleted %d rows, %d were in the ranges", deleted, want)
	}
	for _, tb := range []string{"kv", "pairs"} {
		if n := db.QueryInt64(t, "SELECT count(*) FROM "+tb+" WHERE "+pred); n != 0 {
			t.Errorf("%d rows of %s left in the ranges", n, tb)
		}
	}
	if n := db.QueryInt64(t, "SELECT count(*) FROM kv") + db.QueryInt64(t, "SELECT count(*) FROM pairs"); n != 6000-want {
		t.Errorf("%d rows left, want %d outside the ranges", n, 6000-want)
	}
}

// A chunk read walks the primary key from the last position and stops at
// its LIMIT, however far the copy is: on a table shaped like the demo's
// orders (a composite key, 20% of the space moving in 16 ranges, a token
// index) the planner preferred, for every chunk after the first, a bitmap
// scan of the whole rest of the table and a sort — a chunk cost as much as
// the rows left, the copy's rate rose fivefold as it went (500-900 ms a
// 5,000-row chunk at the start of a demo copy, 70-100 ms at its end), and
// an ETA made early was off by as much.
func TestChunkReadWalksTheKey(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE orders (user_id bigint NOT NULL, id bigint NOT NULL, amount numeric(12,2) NOT NULL, note text,
			PRIMARY KEY (user_id, id));
		INSERT INTO orders SELECT u, u * 1000 + k, u % 997, 'order ' || k FROM generate_series(1, 100000) u, generate_series(1, 2) k;
		CREATE INDEX ON orders ((hashint8extended(user_id, 0)));
		ANALYZE orders`)
	set, err := tableset.Introspect(context.Background(), db.Pool, tableset.Spec{Name: "o", Tables: []tableset.TableSpec{
		{Table: "orders", KeyColumn: "user_id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	var parts []ring.Range
	for i := range 16 { // 16 ranges of 1/80 of the space each
		lo := ring.MinToken + int64(uint64(i)<<60)
		parts = append(parts, ring.Range{Lo: lo, Hi: lo + int64(uint64(1)<<60/5)})
	}
	for _, pos := range []position{{}, {pk: []string{"25000", "25000001"}}, {pk: []string{"75000", "75000002"}}} {
		q := chunkSQL(set.Tables[0], parts, OrderPK, pos, 5000)
		q = strings.TrimSuffix(strings.TrimPrefix(q, "COPY ("), ") TO STDOUT (FORMAT binary)")
		tx, err := db.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		if _, err := tx.Exec(context.Background(), pagingSettings); err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(context.Background(), "EXPLAIN (COSTS OFF) "+q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(context.Background())
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, "Index Scan using orders_pkey") || strings.Contains(text, "Bitmap") || strings.Contains(text, "Sort") {
			t.Errorf("chunk after %v does not walk the primary key:\n%s", pos.pk, text)
		}
	}
}

// TestNarrowRangesPageByToken: ranges that cover under 1/16 of the space in
// all are paged by token where the token index exists (orders), a unit per
// split range, and by primary key in one unit elsewhere.
func TestNarrowRangesPageByToken(t *testing.T) {
	f := newFixture(t, 3000)
	n := len(f.tokens)
	f.ranges = []ring.Range{{Lo: f.tokens[n/5], Hi: f.tokens[n/5+40]}, {Lo: f.tokens[n*3/5], Hi: f.tokens[n*3/5+50]}}
	// The target's own rows were placed outside the fixture's ranges, not these.
	pred := ring.Predicate("hashint8extended(id, 0)", f.ranges)
	f.dst.Exec(t, `DELETE FROM users WHERE id > 1000000 AND `+pred)
	f.dst.Exec(t, `DELETE FROM orders WHERE user_id > 1000000 AND `+strings.ReplaceAll(pred, "(id", "(user_id"))
	opts := f.opts("narrow")
	opts.Split = 2
	st, err := Copy(context.Background(), f.src.Pool, f.dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Units != 6 {
		t.Fatalf("%d units, want 2 ranges x 2 for orders and one each for users and events", st.Units)
	}
	cps, err := Checkpoints(context.Background(), f.dst.Pool, "narrow")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cps {
		if want := map[string]string{"public.orders": "token", "public.users": "pk", "public.events": "pk"}[c.Table]; c.Order != want || !c.Done {
			t.Fatalf("%s paged by %s (done %v), want %s", c.Table, c.Order, c.Done, want)
		}
	}
	f.expectCopied(t)
}

// TestConcurrentRunsOfOneMove: two runs of the same move at once (a worker
// thought dead still copying while its retry runs elsewhere, or a commit its
// client gave up on landing after the next run read the checkpoint). Each
// chunk extends the checkpoint it was read from or is rolled back, so the
// checkpoints count every row exactly once and the copy is exact.
func TestConcurrentRunsOfOneMove(t *testing.T) {
	f := newFixture(t, 3000)
	want := f.expectedRows(t)
	var g errgroup.Group
	var moved atomic.Int64
	for range 2 {
		g.Go(func() error {
			opts := f.opts("twice")
			opts.Retries = 100 // each lost race is a retry from the checkpoint
			st, err := Copy(context.Background(), f.src.Pool, f.dst.Pool, opts)
			moved.Add(st.Rows)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if rows, done, total := checkpointRows(t, f, "twice"); rows != want || done != total {
		t.Fatalf("checkpoints: %d rows of %d, %d of %d units done", rows, want, done, total)
	}
	if moved.Load() != want {
		t.Fatalf("the two runs committed %d rows together, want each row once: %d", moved.Load(), want)
	}
	f.expectCopied(t)
}

// TestThrottledCopyProgressesInShortSlices: a copy throttled to fewer rows
// per slice than its chunk size still advances slice by slice. (A chunk was
// read whole, then waited for: 500 rows at 100 rows/s waited past every
// 2-second slice, was thrown away and read again by the next — the copy of
// a move throttled that way never finished.)
func TestThrottledCopyProgressesInShortSlices(t *testing.T) {
	f := newFixture(t, 1500)
	opts := f.opts("slices")
	opts.Set.Tables = opts.Set.Tables[:1] // users only
	opts.Parallel = 1
	opts.ChunkRows = 500
	opts.RowsPerSec = 100
	var last int64
	for slice := 1; slice <= 3; slice++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := Copy(ctx, f.src.Pool, f.dst.Pool, opts)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		rows, _, _ := checkpointRows(t, f, "slices")
		if rows <= last {
			t.Fatalf("slice %d: the checkpoints hold %d rows, %d before: the throttled copy does not progress", slice, rows, last)
		}
		last = rows
	}
	if last > 3*2*100+3*10 {
		t.Fatalf("%d rows copied in three 2 s slices at 100 rows/s", last)
	}
}

func TestChunkRowsFollowTheThrottle(t *testing.T) {
	for _, tc := range []struct {
		rows, bytes float64
		chunk       int
		rowBytes    float64
		want        int
	}{
		{0, 0, 5000, 0, 5000},
		{100, 0, 5000, 0, 100},
		{1e6, 0, 5000, 0, 5000},
		{0, 64 << 10, 5000, 1024, 64},
		{0, 64 << 10, 5000, 0, 5000}, // no row seen yet
		{10, 1e9, 5000, 1024, 10},
		{0.5, 0, 5000, 0, 1},
	} {
		if got := NewThrottle(tc.rows, tc.bytes).ChunkRows(tc.chunk, tc.rowBytes); got != tc.want {
			t.Errorf("ChunkRows(%d, %g) at %g rows/s, %g B/s = %d, want %d", tc.chunk, tc.rowBytes, tc.rows, tc.bytes, got, tc.want)
		}
	}
}

// TestTablesAdvanceTogether copies three tables of different sizes, one of
// them slow to write on the target, one unit of each at a time: each
// table's share of its estimate stays within a few chunks of the others'
// from the first chunk to the last (copied table after table, one would be
// done while the next had not started), so the copy's rate at its start is
// its rate to the end.
func TestTablesAdvanceTogether(t *testing.T) {
	f := newFixture(t, 2000)
	// Writing users is slow on the target: 20 ms a statement. ENABLE ALWAYS,
	// as the copy's sessions run as replicas.
	f.dst.Exec(t, `CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(0.02); RETURN NULL; END$$;
		CREATE TRIGGER slow AFTER INSERT ON users FOR EACH STATEMENT EXECUTE FUNCTION slow();
		ALTER TABLE users ENABLE ALWAYS TRIGGER slow`)
	est := map[string]int64{}
	for _, table := range []string{"users", "orders", "events"} {
		est["public."+table] = int64(len(dump(t, f.src, table, f.ranges)))
	}
	const chunkRows = 25
	var mu sync.Mutex
	units := map[string]int64{} // rows committed, by table and range
	var worst float64
	var worstAt string
	opts := f.opts("together")
	opts.Parallel, opts.ChunkRows, opts.TableRows = 1, chunkRows, est
	opts.Progress = func(p Progress) {
		mu.Lock()
		defer mu.Unlock()
		units[p.Table+" "+p.Range.String()] = p.UnitRows
		share := map[string]float64{}
		for k, n := range units {
			table := strings.Fields(k)[0]
			share[table] += float64(n) / float64(est[table])
		}
		lo, hi := 1.0, 0.0
		for table := range est {
			lo, hi = min(lo, share[table]), max(hi, share[table])
		}
		if hi-lo > worst {
			worst, worstAt = hi-lo, fmt.Sprint(share)
		}
	}
	st, err := Copy(context.Background(), f.src.Pool, f.dst.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.expectCopied(t)
	// A table reads only when no other is behind it, so the committed
	// shares are apart by at most the three chunks a table can hold read and
	// not yet committed, and the one chunk another read past it.
	smallest := slices.Min([]int64{est["public.users"], est["public.orders"], est["public.events"]})
	bound := 4 * float64(chunkRows) / float64(smallest)
	t.Logf("estimates %v, %d chunks; widest gap between tables' shares %.3f (bound %.3f) at %s", est, st.Chunks, worst, bound, worstAt)
	if worst > bound {
		t.Fatalf("tables apart by %.0f%% of their rows at %s; want within %.0f%%", 100*worst, worstAt, 100*bound)
	}
}

// TestTablesCopyOnASmallPool copies three tables, two units of each at once
// (six units waiting for turns side by side), through a target pool of one
// connection: a unit holds a connection only to write a chunk, so none
// waits for one that a unit waiting for its turn keeps.
func TestTablesCopyOnASmallPool(t *testing.T) {
	f := newFixture(t, 1000)
	cfg, err := pgxpool.ParseConfig(f.dst.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	dst, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	opts := f.opts("small-pool")
	opts.Parallel, opts.Split, opts.Order = 2, 3, OrderToken
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Copy(ctx, f.src.Pool, dst, opts); err != nil {
		t.Fatal(err)
	}
	f.expectCopied(t)
}

// Tables copied side by side under a rows/s throttle share its second's
// worth of rows per chunk: in 2 s slices, where a chunk still waiting for
// the throttle at the slice's end is thrown away, the copy keeps most of the
// throttle's rate (a second's worth each, three tables copied at a third
// of it).
func TestThrottledTablesKeepTheRateInShortSlices(t *testing.T) {
	f := newFixture(t, 3000)
	opts := f.opts("slices-tables")
	opts.Parallel, opts.ChunkRows, opts.RowsPerSec = 1, 500, 100
	const slices = 3
	for range slices {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := Copy(ctx, f.src.Pool, f.dst.Pool, opts)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
	rows, _, _ := checkpointRows(t, f, "slices-tables")
	t.Logf("%d rows in %d slices of 2 s at 100 rows/s", rows, slices)
	if want := int64(0.6 * slices * 2 * 100); rows < want {
		t.Fatalf("%d rows copied in %d slices of 2 s at 100 rows/s; want at least %d", rows, slices, want)
	}
}
