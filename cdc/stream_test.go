package cdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Moving ranges of the tests: two ranges, about 40% of the token space.
var testRanges = []ring.Range{{Lo: ring.MinToken, Hi: -5_000_000_000_000_000_000}, {Lo: 2_000_000_000_000_000_000, Hi: 7_000_000_000_000_000_000}}

func inTestRanges(id int64) bool { return ring.ContainsAny(testRanges, ring.TokenInt64(id)) }

const schemaSQL = `
CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, balance bigint NOT NULL DEFAULT 0, payload text);
ALTER TABLE users ALTER payload SET STORAGE EXTERNAL;
CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint NOT NULL, amount numeric(12,2), note text);`

// big is > 2 KB of incompressible text, stored out of line (TOAST).
const bigSQL = `(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 80))`

type env struct {
	src, dst *pgtest.DB
	set      tableset.Set
	names    Names
	l0       pglogrepl.LSN
	tweak    func(*Options) // applied by options (forcePeek)
	peekLogs *logBuffer     // the stream's log, when forcePeek set it
}

func newEnv(t *testing.T, move string, tables ...tableset.TableSpec) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{src: pgtest.NewDB(t, 0), dst: pgtest.NewDB(t, 1)}
	e.src.Exec(t, schemaSQL)
	e.dst.Exec(t, schemaSQL)
	var err error
	if e.set, err = tableset.Introspect(ctx, e.dst.Pool, tableset.Spec{Name: "s", Tables: tables}, "target"); err != nil {
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

var usersOnly = []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}
var usersOrders = []tableset.TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"}}

// createSlot creates the move's slot; it must exist before the copy.
func (e *env) createSlot(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rc, err := pgconn.Connect(ctx, e.src.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(ctx)
	if e.l0, _, err = CreateSlot(ctx, rc, e.names.Slot); err != nil {
		t.Fatal(err)
	}
	again, snap, err := CreateSlot(ctx, rc, e.names.Slot)
	if err != nil || again > e.l0+1<<30 || snap != "" {
		t.Fatalf("CreateSlot again = %s %q %v, want the existing slot", again, snap, err)
	}
}

// copyRanges copies the moving-range rows of every table in one source
// snapshot taken after the slot (standing in for backfill.Copy: what matters
// is slot → copy).
func (e *env) copyRanges(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	sc, dc := e.src.Conn(t), e.dst.Conn(t)
	if _, err := sc.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatal(err)
	}
	defer sc.Exec(ctx, "ROLLBACK")
	for _, tb := range e.set.Tables {
		pr, pw := io.Pipe()
		errc := make(chan error, 1)
		go func() {
			_, err := sc.PgConn().CopyTo(ctx, pw, "COPY (SELECT * FROM "+tb.Quoted()+" WHERE "+ring.Predicate(tb.TokenSQL(""), testRanges)+") TO STDOUT")
			pw.CloseWithError(err)
			errc <- err
		}()
		if _, err := dc.Exec(ctx, "CREATE TEMP TABLE IF NOT EXISTS c_"+tb.Name+" (LIKE "+tb.Quoted()+")"); err != nil {
			t.Fatal(err)
		}
		if _, err := dc.PgConn().CopyFrom(ctx, pr, "COPY c_"+tb.Name+" FROM STDIN"); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if _, err := dc.Exec(ctx, "INSERT INTO "+tb.Quoted()+" SELECT * FROM c_"+tb.Name+" ON CONFLICT DO NOTHING"); err != nil {
			t.Fatal(err)
		}
	}
}

func (e *env) options() Options {
	o := Options{Move: "test", SourceReplicationDSN: e.src.ReplicationDSN(), TargetDSN: e.dst.DSN + "&application_name=reshard_cdc_test",
		Slot: e.names.Slot, Publication: e.names.Publication, Origin: e.names.Origin, StartLSN: e.l0, Set: e.set, Ranges: testRanges,
		BatchRows: 500, BatchDelay: 20 * time.Millisecond, FlushRows: 300, StatusInterval: 500 * time.Millisecond}
	if e.tweak != nil {
		e.tweak(&o)
	}
	return o
}

// runStream runs the stream in the background; stop cancels it and returns
// Run's error.
func runStream(t *testing.T, s *Stream) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
			if errors.Is(err, context.Canceled) {
				err = nil
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// drain emits a marker on the source and waits until the stream applied it.
func drain(t *testing.T, e *env, s *Stream) {
	t.Helper()
	payload := fmt.Sprintf("drain-%d", rand.Int64())
	e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', $1::text)", payload)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.DrainToMarker(ctx, payload); err != nil {
		t.Fatalf("drain to marker: %v", err)
	}
}

// rowsOf lists "key|md5(row)" of the table's rows in (or, with in=false, out
// of) the moving ranges.
func rowsOf(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tb tableset.Table, in bool) []string {
	t.Helper()
	pred := ring.Predicate(tb.TokenSQL("t"), testRanges)
	if !in {
		pred = "(" + pred + ") IS NOT TRUE"
	}
	rows, err := q.Query(context.Background(), "SELECT t.id::text || '|' || md5(t::text) FROM "+tb.Quoted()+" AS t WHERE "+pred+" ORDER BY t.id")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func head(s []string) []string { return s[:min(len(s), 5)] }

func diff(a, b []string) (onlyA, onlyB []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			onlyA = append(onlyA, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return
}

// assertConverged: the target's moving-range rows equal the source's, row
// for row, and its other rows are exactly the ones it owned before.
func assertConverged(t *testing.T, e *env, targetOwned map[string][]string) {
	t.Helper()
	for _, tb := range e.set.Tables {
		src := rowsOf(t, e.src.Pool, tb, true)
		dst := rowsOf(t, e.dst.Pool, tb, true)
		slices.Sort(src)
		slices.Sort(dst)
		if a, b := diff(src, dst); len(a)+len(b) > 0 {
			t.Errorf("%s: %d source rows in the ranges, %d target rows; only on source (%d): %v; only on target (%d): %v", tb, len(src), len(dst), len(a), head(a), len(b), head(b))
		}
		if len(src) == 0 {
			t.Errorf("%s: no rows in the ranges: the test proves nothing", tb)
		}
		if out := rowsOf(t, e.dst.Pool, tb, false); !slices.Equal(out, targetOwned[tb.Name]) {
			t.Errorf("%s: target rows outside the ranges changed: %v, want %v", tb, head(out), head(targetOwned[tb.Name]))
		}
	}
}

// writer runs random application writes on the source until stopped:
// inserts, updates that leave a TOASTed payload unchanged, payload updates,
// deletes, and key moves in and out of the ranges (the payload unchanged).
//
// stop does not cancel the statement in flight: it ends once that statement
// has. A cancelled Exec returns at once (pgx drops the connection and sends a
// cancel request that lands later), and the server may still commit the
// statement after the marker the test then drains to, so the test would
// report a row the stream "lost".
type writer struct {
	stop func()
	done chan struct{}
	n    int
	err  error
}

func startWriter(t *testing.T, db *pgtest.DB, orders bool, seed uint64) *writer {
	var stopped atomic.Bool
	w := &writer{stop: func() { stopped.Store(true) }, done: make(chan struct{})}
	rnd := rand.New(rand.NewPCG(seed, 1))
	go func() {
		defer close(w.done)
		next := int64(100_000 + seed*1_000_000)
		for !stopped.Load() {
			id := rnd.Int64N(2000) + 1
			var sql string
			var args []any
			switch op := rnd.IntN(10); {
			case op < 2:
				next++
				sql, args = "INSERT INTO users VALUES ($1::bigint, 'new'||$1::bigint, 0, "+bigSQL+") ON CONFLICT DO NOTHING", []any{next}
			case op < 5:
				sql, args = "UPDATE users SET balance = balance + 1 WHERE id = $1", []any{id}
			case op < 6:
				sql, args = "UPDATE users SET payload = "+bigSQL+" WHERE id = $1", []any{id}
			case op < 7:
				sql, args = "DELETE FROM users WHERE id = $1", []any{id}
			case op < 8:
				next++
				sql, args = "UPDATE users SET id = $2 WHERE id = $1", []any{id, next} // key move, payload unchanged
			default:
				if !orders {
					continue
				}
				oid := rnd.Int64N(3000) + 1
				switch rnd.IntN(3) {
				case 0:
					sql, args = "INSERT INTO orders VALUES ($1, $2, 1, 'w') ON CONFLICT (id) DO UPDATE SET amount = orders.amount + 1", []any{oid, id}
				case 1:
					sql, args = "UPDATE orders SET user_id = $2 WHERE id = $1", []any{oid, id} // key move
				default:
					sql, args = "DELETE FROM orders WHERE id = $1", []any{oid} // DELETE without the key
				}
			}
			if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
				w.err = err
				return
			}
			w.n++
		}
	}()
	t.Cleanup(func() { w.stop(); <-w.done })
	return w
}

func (w *writer) finish(t *testing.T) {
	t.Helper()
	w.stop()
	<-w.done
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
	t.Logf("writer made %d writes", w.n)
}

// TestWriterFinishWaitsForItsLastWrite: once finish returns, no statement of
// the writer may still run on the source, or it could commit after the marker
// a test then drains to. The writer's statement here waits on a table lock
// that is released only after finish was called.
func TestWriterFinishWaitsForItsLastWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, schemaSQL)
	db.Exec(t, "INSERT INTO users SELECT g, 'u'||g, g, 'p' FROM generate_series(1, 2000) g")
	tx, err := db.Conn(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE users IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	w := startWriter(t, db, false, 5)
	for db.QueryInt64(t, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") == 0 {
		if ctx.Err() != nil {
			t.Fatal("the writer never waited for the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var releasing atomic.Bool
	released := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		releasing.Store(true)
		released <- tx.Commit(ctx)
	}()
	w.finish(t)
	running := db.QueryInt64(t, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' AND query ~* '^\\s*(insert|update|delete)'")
	if !releasing.Load() || running > 0 {
		t.Errorf("finish returned before the writer's statement ended (lock released: %v; writer statements still running: %d)", releasing.Load(), running)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
}

func seedSource(t *testing.T, e *env) {
	e.src.Exec(t, "INSERT INTO users SELECT g, 'u'||g, g, "+bigSQL+" FROM generate_series(1, 2000) g")
	e.src.Exec(t, "INSERT INTO orders SELECT g, (g % 2000) + 1, g, 'o' FROM generate_series(1, 3000) g")
}

// seedTargetOwned gives the target rows of its own, outside the ranges.
func seedTargetOwned(t *testing.T, e *env) map[string][]string {
	n := 0
	for id := int64(50_000_000); n < 20; id++ {
		if !inTestRanges(id) {
			e.dst.Exec(t, "INSERT INTO users VALUES ($1, 'own', 0, 'own')", id)
			e.dst.Exec(t, "INSERT INTO orders VALUES ($1, $1, 1, 'own')", id)
			n++
		}
	}
	owned := map[string][]string{}
	for _, tb := range e.set.Tables {
		owned[tb.Name] = rowsOf(t, e.dst.Pool, tb, false)
	}
	return owned
}

func TestConvergesUnderLiveWrites(t *testing.T) { testConvergesUnderLiveWrites(t, streamOnly) }

func testConvergesUnderLiveWrites(t *testing.T, peek peekMode) {
	e := newEnv(t, peekName("live", peek), usersOnly...)
	forcePeek(e, peek)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	w := startWriter(t, e.src, false, 1)
	time.Sleep(300 * time.Millisecond)
	e.createSlot(t)
	time.Sleep(300 * time.Millisecond)
	e.copyRanges(t) // under live writes
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)
	time.Sleep(2 * time.Second) // catch-up under live writes
	w.finish(t)
	drain(t, e, s)
	assertConverged(t, e, owned)
	received, applied, acked := s.Positions()
	if !(acked <= applied && applied <= received) || applied == 0 {
		t.Errorf("positions received %s applied %s acked %s", received, applied, acked)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertPeeked(t, e, s, peek)
}

// supervise runs the stream, restarting it after retryable errors as the
// worker does, until stopped.
func supervise(t *testing.T, s *Stream) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			err := s.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			if !pgerr.Retryable(err) {
				t.Errorf("stream stopped with a non-retryable error: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// drainSupervised is drain for a stream that supervise restarts: a Run that
// stops while the drain waits (a killed connection noticed only when the
// marker's transaction is applied) ends that wait with its error; the next
// Run applies the marker, so the drain waits again.
func drainSupervised(t *testing.T, e *env, s *Stream) {
	t.Helper()
	payload := fmt.Sprintf("drain-%d", rand.Int64())
	e.src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', $1::text)", payload)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err := s.DrainToMarker(ctx, payload)
		if err == nil {
			return
		}
		if ctx.Err() != nil || !strings.HasPrefix(err.Error(), "stream stopped") {
			t.Fatalf("drain to marker: %v", err)
		}
		t.Logf("drain to marker: %v; waiting for the next Run", err)
		time.Sleep(100 * time.Millisecond)
	}
}

func TestCrashResume(t *testing.T) { testCrashResume(t, streamOnly) }

func testCrashResume(t *testing.T, peek peekMode) {
	e := newEnv(t, peekName("crash", peek), usersOnly...)
	forcePeek(e, peek)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	w := startWriter(t, e.src, false, 2)
	e.createSlot(t)
	e.copyRanges(t)

	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)
	// Cancelled mid-way, once something is applied (700 ms were not always
	// enough on a loaded machine) while the writer goes on.
	time.Sleep(700 * time.Millisecond)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, applied, _ := s.Positions(); applied > e.l0 {
			break
		}
	}
	if err := stop(); err != nil { // context cancel mid-way
		t.Fatal(err)
	}
	_, firstApplied, _ := s.Positions()
	if firstApplied <= e.l0 {
		t.Fatalf("nothing applied before the cancel (applied %s, L0 %s)", firstApplied, e.l0)
	}

	// A new Stream (a restarted worker) resumes from the target's origin.
	s, err = New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stopSup := supervise(t, s)
	// Where it resumed is known once it has started (0/0 before: 500 ms
	// were not always enough on a loaded machine).
	var resumed pglogrepl.LSN
	for deadline := time.Now().Add(20 * time.Second); resumed == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, resumed, _ = s.Positions()
	}
	if resumed < firstApplied {
		t.Fatalf("resumed at %s, before the origin's %s", resumed, firstApplied)
	}
	for i := 0; i < 2; i++ { // killed connections, twice
		// The supervisor reconnects after a backoff: on a loaded machine
		// (CI, 2026-12-04) not always within the 600 ms below, so each
		// kill waits for a connection to kill.
		var n int64
		for deadline := time.Now().Add(20 * time.Second); n == 0 && time.Now().Before(deadline); {
			n += e.src.QueryInt64(t, "SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", e.names.Slot)
			n += e.dst.QueryInt64(t, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'reshard_cdc_test'")
			if n == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if n == 0 {
			t.Fatalf("kill %d: no stream connection to kill in 20 s: the stream did not reconnect", i+1)
		}
		time.Sleep(600 * time.Millisecond)
	}
	w.finish(t)
	drainSupervised(t, e, s)
	stopSup()
	assertConverged(t, e, owned)
	var origin string
	if err := e.dst.Pool.QueryRow(context.Background(), "SELECT remote_lsn::text FROM pg_replication_origin_status WHERE external_id = $1", e.names.Origin).Scan(&origin); err != nil {
		t.Fatal(err)
	}
	if lsn, _ := pglogrepl.ParseLSN(origin); lsn <= firstApplied {
		t.Errorf("origin remote_lsn %s did not advance past %s", origin, firstApplied)
	}
	assertPeeked(t, e, s, peek)
}

// outsideUser returns user ids whose token is outside the moving ranges.
func outsideUsers(n int, from int64) []int64 {
	var out []int64
	for id := from; len(out) < n; id++ {
		if !inTestRanges(id) {
			out = append(out, id)
		}
	}
	return out
}

func TestMultiTableSetAndDeletesWithoutKey(t *testing.T) {
	e := newEnv(t, "multi", usersOrders...)
	if e.set.Tables[1].KeyInIdentity() {
		t.Fatal("orders' replica identity should lack user_id")
	}
	seedSource(t, e)
	// Orders 3001..3010 of users outside the ranges, whose ids the target
	// also uses for orders of its own: the source deletes them (DELETE
	// messages carry only the id) and the target's rows must stay.
	srcUsers, dstUsers := outsideUsers(10, 1), outsideUsers(10, 1_000_000)
	for i := range srcUsers {
		e.src.Exec(t, "INSERT INTO orders VALUES ($1, $2, 0, 'src')", 3001+i, srcUsers[i])
		e.dst.Exec(t, "INSERT INTO orders VALUES ($1, $2, 0, 'target-owned')", 3001+i, dstUsers[i])
	}
	owned := seedTargetOwned(t, e)
	w := startWriter(t, e.src, true, 3)
	e.createSlot(t)
	e.copyRanges(t)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)
	time.Sleep(500 * time.Millisecond)
	e.src.Exec(t, "DELETE FROM orders WHERE id BETWEEN 3001 AND 3010")
	// and orders of moving users deleted by id only: must go on the target.
	e.src.Exec(t, "DELETE FROM orders WHERE id IN (SELECT id FROM orders WHERE id <= 3000 AND "+ring.Predicate(e.set.Tables[1].TokenSQL(""), testRanges)+" LIMIT 20)")
	time.Sleep(time.Second)
	w.finish(t)
	drain(t, e, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, e, owned)
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM orders WHERE note = 'target-owned'"); n != 10 {
		t.Errorf("target-owned orders left: %d, want 10", n)
	}
}

func TestCollisionWithTargetRowStops(t *testing.T) {
	e := newEnv(t, "collide", usersOrders...)
	seedSource(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	outside := outsideUsers(1, 1)[0]
	e.dst.Exec(t, "INSERT INTO orders VALUES (9001, $1, 5, 'mine')", outside)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	var inside int64 = 1
	for !inTestRanges(inside) {
		inside++
	}
	e.src.Exec(t, "INSERT INTO orders VALUES (9001, $1, 7, 'theirs')", inside)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Run(ctx)
	var ce *CollisionError
	if !errors.As(err, &ce) || ce.Table != "public.orders" || ce.Key != "id=9001" || pgerr.Retryable(err) {
		t.Fatalf("Run = %v, want a non-retryable collision on public.orders id=9001", err)
	}
	var note string
	var user int64
	if err := e.dst.Pool.QueryRow(ctx, "SELECT note, user_id FROM orders WHERE id = 9001").Scan(&note, &user); err != nil || note != "mine" || user != outside {
		t.Fatalf("target row after the collision: %q %d %v, want it intact", note, user, err)
	}
}

// TestUniqueCollisionStops: a unique index beyond the primary key
// (users.email) on the target; the source inserts a moving user with the
// email of a user the target owns: the catch-up stops, not retryable,
// naming the constraint, the key and the value, and the target's row stays.
func TestUniqueCollisionStops(t *testing.T) {
	e := newEnv(t, "unique", usersOnly...)
	e.createSlot(t)
	outside := outsideUsers(1, 1)[0]
	e.dst.Exec(t, "CREATE UNIQUE INDEX users_email_key ON users (email)")
	e.dst.Exec(t, "INSERT INTO users VALUES ($1, 'taken@example.com', 0, 'mine')", outside)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	var inside int64 = 1
	for !inTestRanges(inside) {
		inside++
	}
	e.src.Exec(t, "INSERT INTO users VALUES ($1, 'taken@example.com', 0, 'theirs')", inside)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Run(ctx)
	var ue *pgerr.UniqueError
	if !errors.As(err, &ue) || pgerr.Retryable(err) {
		t.Fatalf("Run = %v, want a non-retryable unique collision", err)
	}
	if want := `unique constraint "users_email_key" of public.users: Key (email)=(taken@example.com) already exists on the target`; !strings.Contains(err.Error(), want) {
		t.Fatalf("Run = %q\nlacks %q", err, want)
	}
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1 AND payload = 'mine'", outside); n != 1 {
		t.Fatal("the target's own row changed")
	}
}

// TestSchemaChangesFlowThrough: under live writes, the applier follows
// additive changes made in schema apply's order (a column with a default
// and a widened type on the target first, then on the source; a column
// dropped on the source first, then on the target), and waits, retryably,
// naming the column and the command, for a column added by hand on the
// source only, then resumes by itself once the target has it. The target
// ends equal to the source, row for row, every column.
func TestSchemaChangesFlowThrough(t *testing.T) {
	e := newEnv(t, "ddl", usersOnly...)
	seedSource(t, e)
	seedTargetOwned(t, e)
	ownedRows := func() []string { // the target's own rows, in the columns they had before the DDL
		return rowsAsText(t, e.dst, "SELECT id::text || '|' || md5(row(id, email, balance::bigint, payload)::text) FROM users AS t WHERE ("+ring.Predicate("hashint8extended(t.id, 0)", testRanges)+") IS NOT TRUE ORDER BY id")
	}
	owned := ownedRows()
	e.createSlot(t)
	e.copyRanges(t)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var waits []string
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	run := func() {
		defer close(done)
		for ctx.Err() == nil {
			err := s.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			if !pgerr.Retryable(err) {
				t.Errorf("stream stopped with a non-retryable error: %v", err)
				return
			}
			var cw *tableset.ColumnWaitError
			if errors.As(err, &cw) {
				mu.Lock()
				waits = append(waits, err.Error())
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	go run()
	t.Cleanup(func() { cancel(); <-done })
	w := startWriter(t, e.src, false, 7)
	time.Sleep(500 * time.Millisecond)

	// schema apply's order for additive changes: the target, then the source.
	for _, db := range []*pgtest.DB{e.dst, e.src} {
		db.Exec(t, "ALTER TABLE users ADD COLUMN note text DEFAULT 'none'")
		db.Exec(t, "ALTER TABLE users ALTER COLUMN balance TYPE numeric(30,0)")
	}
	e.src.Exec(t, "UPDATE users SET note = 'set after the DDL' WHERE id % 7 = 0")
	time.Sleep(500 * time.Millisecond)
	drainSupervised(t, e, s)

	// By hand, on the source only: the applier waits, saying what to run.
	e.src.Exec(t, "ALTER TABLE users ADD COLUMN tag int")
	mine := int64(900_000_000) // no writer's key
	for !inTestRanges(mine) {
		mine++
	}
	e.src.Exec(t, "INSERT INTO users (id, email, tag) VALUES ($1, 'mine', 5)", mine)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(waits)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the applier did not report that the target lacks column tag")
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	msg := waits[0]
	mu.Unlock()
	t.Logf("while the target lacks the column: %s", msg)
	for _, want := range []string{"the applier waits for target at ", "to get column tag of public.users", `reshard schema apply --keyspace s 'ALTER TABLE public.users ADD COLUMN tag integer'`, "resumes by itself"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the wait message lacks %q", want)
		}
	}
	time.Sleep(time.Second) // still waiting, still writing
	e.dst.Exec(t, "ALTER TABLE users ADD COLUMN tag int")
	drainSupervised(t, e, s)
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1 AND tag = 5", mine); n != 1 {
		t.Errorf("the change written while the target lacked the column did not arrive")
	}

	// A drop: the source first, then the target, both while the stream is
	// stopped, so that changes written with the column still wait in the
	// slot when the target no longer has it.
	cancel()
	<-done
	e.src.Exec(t, "UPDATE users SET note = 'late', tag = 6 WHERE id = $1", mine)
	e.src.Exec(t, "ALTER TABLE users DROP COLUMN note")
	e.dst.Exec(t, "ALTER TABLE users DROP COLUMN note")
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	done = make(chan struct{})
	go run()
	time.Sleep(500 * time.Millisecond)
	w.finish(t)
	drainSupervised(t, e, s)
	if n := e.dst.QueryInt64(t, "SELECT count(*) FROM users WHERE id = $1 AND tag = 6", mine); n != 1 {
		t.Errorf("the change written with the since-dropped column did not arrive")
	}
	mu.Lock()
	t.Logf("%d writes; the stream waited %d time(s) for the target's column", w.n, len(waits))
	mu.Unlock()
	if got := ownedRows(); !slices.Equal(got, owned) {
		t.Errorf("the target's own rows changed: %v, want %v", head(got), head(owned))
	}
	// Every row of the ranges, every column, the same on both sides.
	for _, db := range []*pgtest.DB{e.src, e.dst} {
		if n := db.QueryInt64(t, "SELECT count(*) FROM pg_attribute WHERE attrelid = 'users'::regclass AND attnum > 0 AND NOT attisdropped"); n != 5 {
			t.Fatalf("%d columns, want 5 (id, email, balance, payload, tag)", n)
		}
	}
	e.set.Tables[0].Columns = nil // rowsOf reads whole rows
	src := rowsOf(t, e.src.Pool, e.set.Tables[0], true)
	dst := rowsOf(t, e.dst.Pool, e.set.Tables[0], true)
	if a, b := diff(src, dst); len(a)+len(b) > 0 || len(src) == 0 {
		t.Errorf("%d source rows in the ranges, %d target rows; only on source (%d): %v; only on target (%d): %v", len(src), len(dst), len(a), head(a), len(b), head(b))
	}
}

func rowsAsText(t *testing.T, db *pgtest.DB, sql string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// slotSnapshot is what verify does: a temporary slot exporting its
// snapshot, imported into a read transaction on the source.
func slotSnapshot(t *testing.T, e *env) (pglogrepl.LSN, []string) {
	t.Helper()
	ctx := context.Background()
	rc, err := pgconn.Connect(ctx, e.src.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close(ctx)
	res, err := pglogrepl.CreateReplicationSlot(ctx, rc, fmt.Sprintf("v_%d", rand.Uint32()), "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		t.Fatal(err)
	}
	lsn, _ := pglogrepl.ParseLSN(res.ConsistentPoint)
	tx, err := e.src.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(res.SnapshotName)); err != nil {
		t.Fatal(err)
	}
	rows := rowsOf(t, tx, e.set.Tables[0], true)
	return lsn, rows
}

func TestHoldAtUnderLiveWrites(t *testing.T) { testHoldAtUnderLiveWrites(t, streamOnly) }

func testHoldAtUnderLiveWrites(t *testing.T, peek peekMode) {
	e := newEnv(t, peekName("hold", peek), usersOnly...)
	forcePeek(e, peek)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)
	w := startWriter(t, e.src, false, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	passed := 0
	for i := 0; i < 4; i++ {
		time.Sleep(300 * time.Millisecond)
		lsn, want := slotSnapshot(t, e)
		err := s.HoldAt(ctx, lsn)
		for errors.Is(err, ErrHoldPassed) { // gated: a new snapshot cannot be passed
			passed++
			lsn, want = slotSnapshot(t, e)
			err = s.HoldAt(ctx, lsn)
		}
		if err != nil {
			t.Fatalf("HoldAt(%s): %v", lsn, err)
		}
		got := rowsOf(t, e.dst.Pool, e.set.Tables[0], true)
		_, applied, _ := s.Positions()
		s.Release()
		if a, b := diff(want, got); len(a)+len(b) > 0 {
			t.Fatalf("held at %s (applied %s): target differs from the source snapshot: only source %v, only target %v", lsn, applied, head(a), head(b))
		}
	}
	t.Logf("ErrHoldPassed retries: %d", passed)
	w.finish(t)
	drain(t, e, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, e, owned)
	assertPeeked(t, e, s, peek)
}

// A HoldAt asked of a stream that was run again (a reconnect: Run resumes
// from the target's replication origin) at an LSN the target is already
// past must say so (ErrHoldPassed): the runner that committed past it is
// gone, but what it committed is on the target. Holding there instead
// reports the hold reached with the target ahead of the source snapshot,
// and verify compares the two: a false mismatch.
func TestHoldAtPassedBeforeAReconnect(t *testing.T) {
	e := newEnv(t, "hold_reconnect", usersOnly...)
	seedSource(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)
	// The snapshot verify would compare at, then updates in the ranges
	// committed after it and applied on the target.
	lsn, want := slotSnapshot(t, e)
	e.src.Exec(t, "UPDATE users SET balance = balance + 1 WHERE id <= 500")
	drain(t, e, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, applied, _ := s.Positions()
	if applied <= lsn {
		t.Fatalf("applied %s, want past the snapshot's %s", applied, lsn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, again := range []struct {
		name string
		s    *Stream
	}{{"the same stream run again", s}, {"a new stream (a worker's next session)", nil}} {
		st := again.s
		if st == nil {
			if st, err = New(e.options()); err != nil {
				t.Fatal(err)
			}
		}
		stop := runStream(t, st)
		err := st.HoldAt(ctx, lsn)
		got := rowsOf(t, e.dst.Pool, e.set.Tables[0], true)
		st.Release()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, ErrHoldPassed) {
			onlySrc, onlyDst := diff(slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(got))) // diff merges by string
			t.Errorf("%s: HoldAt(%s) with the target applied to %s = %v, want ErrHoldPassed; the target then differs from the source snapshot in %d rows (only source %v, only target %v)",
				again.name, lsn, applied, err, len(onlySrc), head(onlySrc), head(onlyDst))
		}
	}
}

// An idle stream (no writes in its ranges) still moves its acknowledged
// position forward, by heartbeats it commits on the source, so the slot does
// not pin WAL.
func TestIdleStreamAdvancesByHeartbeat(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := newEnv(t, "idle", usersOnly...)
	e.createSlot(t)
	o := e.options()
	o.HeartbeatInterval = 500 * time.Millisecond
	st, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, st)
	defer stop()
	// WAL moves on the source, outside the publication's tables.
	e.src.Exec(t, "CREATE TABLE other (x int); INSERT INTO other SELECT generate_series(1, 1000)")
	var s string
	if err := e.src.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	end, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, applied, acked := st.Positions()
		if applied >= end && acked >= end {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle stream did not advance past %s: applied %s acked %s", end, applied, acked)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var confirmed string
	if err := e.src.Pool.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.names.Slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if c, _ := pglogrepl.ParseLSN(confirmed); c < end {
		t.Fatalf("slot confirmed_flush_lsn %s is behind %s", confirmed, end)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
