package backfill

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/cdctest"
	"github.com/reshard/reshard/testkit/pgtest"
)

// The copy beside its stream (StreamDuringCopy, cdc.Options.CopyGate)
// against real servers: see streamDuringCopy.
func TestStreamDuringCopyLosesNothing(t *testing.T) {
	streamDuringCopy(t, 3*time.Second)
}

const gatedDDL = `
	CREATE TABLE gusers (id bigint PRIMARY KEY, email text NOT NULL, balance bigint NOT NULL DEFAULT 0, payload text);
	ALTER TABLE gusers ALTER payload SET STORAGE EXTERNAL;
	CREATE TABLE gorders (id bigint PRIMARY KEY, user_id bigint NOT NULL, amount int NOT NULL DEFAULT 0)`

// big is > 2 KB of incompressible text, stored out of line (TOAST).
const gatedBig = `(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 80))`

var gatedRanges = []ring.Range{{Lo: ring.MinToken, Hi: -5_000_000_000_000_000_000}, {Lo: 2_000_000_000_000_000_000, Hi: 7_000_000_000_000_000_000}}

// streamDuringCopy runs a copy throttled to last about copyFor while the
// move's stream runs beside it and writers insert, update (TOASTed payloads
// unchanged and changed), delete and change keys (a user's primary key, an
// order's shard key) on the source; a worker kill (the copy's and the
// stream's contexts cancelled, both started again) falls in the copy. Once
// the copy is done and the stream has applied the writers' last change,
// the target's rows in the moving ranges are the source's, row for row:
// nothing lost, duplicated, stale or resurrected. The slot's confirmed
// position moved while the copy ran, and the gate skipped changes.
func streamDuringCopy(t *testing.T, copyFor time.Duration) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	began := time.Now()
	defer func() { t.Logf("%s from the servers up", time.Since(began).Round(time.Millisecond)) }()
	src.Exec(t, gatedDDL)
	dst.Exec(t, gatedDDL)
	const users = 6000
	src.Exec(t, fmt.Sprintf(`INSERT INTO gusers SELECT g, 'u'||g, g, CASE WHEN g %% 5 = 0 THEN %s END FROM generate_series(1, %d) g;
		INSERT INTO gorders SELECT g, g %% %d + 1, g FROM generate_series(1, %d) g; ANALYZE`, gatedBig, users, users, users))
	spec := tableset.Spec{Name: "g", Tables: []tableset.TableSpec{{Table: "gusers", KeyColumn: "id"}, {Table: "gorders", KeyColumn: "user_id"}}}
	set, err := tableset.Introspect(ctx, dst.Pool, spec, "target")
	if err != nil {
		t.Fatal(err)
	}
	move := fmt.Sprintf("gated%d", rand.Uint32())
	names := cdctest.Publication(t, ctx, src, move, set, gatedRanges)
	w := startGatedWriters(t, src, users)
	time.Sleep(200 * time.Millisecond)
	l0 := cdctest.Slot(t, ctx, src, names.Slot)
	t.Cleanup(func() { cdc.DropSlot(context.Background(), src.Pool, names.Slot) })

	// The stream catches up by SQL whenever it is 1 MB behind, not 16:
	// the gate's reads of the copy's progress make it fall behind, and on
	// CI's loaded machine (writers 66790 writes in 11.6 s) it was 50 MB
	// behind and applied one span of SQL reads for the whole copy, the
	// slot's confirmed position unmoved (cdc.TestPeekAdvancesTheSlotWithinASpan).
	// Here it goes back and forth between SQL and the walsender during the
	// copy on any machine.
	streamOpts := cdc.Options{Move: move, SourceReplicationDSN: src.ReplicationDSN(), TargetDSN: dst.DSN, Slot: names.Slot,
		Publication: names.Publication, Origin: names.Origin, StartLSN: l0, Set: set, Ranges: gatedRanges, CopyGate: move,
		BatchDelay: 20 * time.Millisecond, StatusInterval: 200 * time.Millisecond,
		PeekCatchUpBytes: 1 << 20, PeekCheckInterval: 500 * time.Millisecond}
	var inRanges int64
	for _, tb := range set.Tables {
		inRanges += src.QueryInt64(t, "SELECT count(*) FROM "+tb.Quoted()+" WHERE "+ring.Predicate(tb.TokenSQL(""), gatedRanges))
	}
	copyOpts := Options{Move: move, Set: set, Ranges: gatedRanges, ChunkRows: 1000, StreamDuringCopy: true,
		RowsPerSec: float64(inRanges) / copyFor.Seconds()}

	// Each chunk waits between its read and its write, as under load: a
	// change applied in that window, not held, is overwritten by the
	// chunk's older image.
	afterGatedRead = func() { time.Sleep(500 * time.Millisecond) }
	t.Cleanup(func() { afterGatedRead = nil })

	// The first worker: stream and copy, killed 40 % into the copy, and
	// not before its first chunk committed (CI's loaded machine once took
	// longer than that for it, and the second copy then resumed nothing).
	s1 := superviseGated(t, streamOpts)
	killCtx, kill := context.WithCancel(ctx)
	committed := make(chan struct{})
	var once sync.Once
	first := copyOpts
	first.Progress = func(Progress) { once.Do(func() { close(committed) }) }
	go func() {
		select {
		case <-time.After(copyFor * 4 / 10):
		case <-killCtx.Done():
			return
		}
		select {
		case <-committed:
		case <-killCtx.Done():
		}
		kill()
	}()
	st1, err := Copy(killCtx, src.Pool, dst.Pool, first)
	kill()
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("the copy before the kill: %+v, %v; want it cut by the kill", st1, err)
	}
	s1.stop()
	killed := s1.s.GateStats()
	t.Logf("killed at %d rows copied: gate skipped %d, held %d", st1.Rows, killed.Skipped, killed.Held)

	// The second worker: a new stream from the origin, the copy from its
	// checkpoints.
	s2 := superviseGated(t, streamOpts)
	copyStart, confirmedAtStart := currentLSN(t, src), confirmedLSN(t, src, names.Slot)
	var peak atomic.Int64
	peakDone := watchRetained(t, src, names.Slot, &peak)
	st2, err := Copy(ctx, src.Pool, dst.Pool, copyOpts)
	if err != nil {
		t.Fatal(err)
	}
	confirmed := confirmedLSN(t, src, names.Slot)
	copyEnd := currentLSN(t, src)
	peakDone()
	if st2.Resumed == 0 {
		t.Errorf("the second copy resumed no unit: %+v", st2)
	}
	if confirmed <= confirmedAtStart {
		t.Errorf("the slot confirmed %s at the copy's end, as at its start: the stream did not apply during the copy", confirmed)
	}
	time.Sleep(300 * time.Millisecond)
	w.finish(t)
	drainAndStop(t, src, s2)
	g := s2.s.GateStats()
	t.Logf("copy resumed: %d rows in %s; WAL written during it %d KiB, slot's peak retained %d KiB; gate skipped %d, held %d; writers made %d writes",
		st2.Rows, st2.Elapsed.Round(time.Millisecond), (copyEnd-copyStart)/1024, peak.Load()/1024, g.Skipped, g.Held, w.n.Load())
	if killed.Skipped+g.Skipped == 0 {
		t.Error("the gate skipped no change: the writers never wrote ahead of the copy, the test proves little")
	}
	sameInRanges(t, src, dst, set)
}

// drainAndStop writes a marker on the source, waits until the stream has
// applied everything before it, and stops the stream.
func drainAndStop(t *testing.T, src *pgtest.DB, s gatedStream) {
	t.Helper()
	payload := fmt.Sprintf("drain-%d", rand.Int64())
	src.Exec(t, "SELECT pg_logical_emit_message(true, 'reshard', $1::text)", payload)
	dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.s.DrainToMarker(dctx, payload); err != nil {
		t.Fatal(err)
	}
	s.stop()
}

// sameInRanges fails the test unless every table of set holds the same rows
// (key and md5 of the row) in gatedRanges on both servers.
func sameInRanges(t *testing.T, src, dst *pgtest.DB, set tableset.Set) {
	t.Helper()
	for _, tb := range set.Tables {
		want, got := gatedRows(t, src, tb), gatedRows(t, dst, tb)
		if a, b := diffSorted(want, got); len(a)+len(b) > 0 {
			t.Errorf("%s: %d rows on the source in the ranges, %d on the target; source only or newer (%d): %v; target only or stale (%d): %v",
				tb, len(want), len(got), len(a), a[:min(len(a), 5)], len(b), b[:min(len(b), 5)])
		}
	}
}

type gatedStream struct {
	s    *cdc.Stream
	stop func()
}

// superviseGated runs a stream, started again after retryable errors as a
// worker does, until stopped.
func superviseGated(t *testing.T, o cdc.Options) gatedStream {
	s, err := cdc.New(o)
	if err != nil {
		t.Fatal(err)
	}
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
				t.Errorf("stream stopped: %v", err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return gatedStream{s: s, stop: stop}
}

type gatedWriters struct {
	stopped atomic.Bool
	wg      sync.WaitGroup
	n       atomic.Int64
	mu      sync.Mutex
	err     error
}

// startGatedWriters runs two writers on the source until finish.
func startGatedWriters(t *testing.T, db *pgtest.DB, users int64) *gatedWriters {
	w := &gatedWriters{}
	var next atomic.Int64
	next.Store(10 * users)
	for seed := range uint64(2) {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rnd := rand.New(rand.NewPCG(seed, 7))
			for !w.stopped.Load() {
				id := rnd.Int64N(users) + 1
				var sql string
				var args []any
				switch op := rnd.IntN(12); {
				case op < 2:
					sql, args = "INSERT INTO gusers VALUES ($1::bigint, 'new'||$1::bigint, 0, "+gatedBig+") ON CONFLICT DO NOTHING", []any{next.Add(1)}
				case op < 4:
					sql, args = "INSERT INTO gusers VALUES ($1::bigint, 'again', 1) ON CONFLICT (id) DO UPDATE SET balance = gusers.balance + 1", []any{id}
				case op < 6:
					sql, args = "UPDATE gusers SET balance = balance + 1 WHERE id = $1", []any{id} // payload unchanged
				case op < 7:
					sql, args = "UPDATE gusers SET payload = "+gatedBig+" WHERE id = $1", []any{id}
				case op < 8:
					sql, args = "DELETE FROM gusers WHERE id = $1", []any{id}
				case op < 9:
					sql, args = "UPDATE gusers SET id = $2 WHERE id = $1", []any{id, next.Add(1)} // a primary-key change
				case op < 10:
					sql, args = "UPDATE gorders SET user_id = $2, amount = amount + 1 WHERE id = $1", []any{rnd.Int64N(users) + 1, id} // a shard-key change
				case op < 11:
					sql, args = "DELETE FROM gorders WHERE id = $1", []any{rnd.Int64N(users) + 1} // no shard key in the old tuple
				default:
					sql, args = "INSERT INTO gorders VALUES ($1, $2, 1) ON CONFLICT (id) DO UPDATE SET amount = gorders.amount + 1", []any{rnd.Int64N(users) + 1, id}
				}
				if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
					w.mu.Lock()
					w.err = err
					w.mu.Unlock()
					return
				}
				w.n.Add(1)
			}
		}()
	}
	t.Cleanup(func() { w.stopped.Store(true); w.wg.Wait() })
	return w
}

func (w *gatedWriters) finish(t *testing.T) {
	t.Helper()
	w.stopped.Store(true)
	w.wg.Wait()
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
}

func currentLSN(t *testing.T, db *pgtest.DB) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := db.Pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func confirmedLSN(t *testing.T, db *pgtest.DB, slot string) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := db.Pool.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// watchRetained keeps in peak the most WAL the slot retained (from its
// restart_lsn) until the returned stop.
func watchRetained(t *testing.T, db *pgtest.DB, slot string, peak *atomic.Int64) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var r int64
			if err := db.Pool.QueryRow(ctx, "SELECT coalesce(pg_current_wal_lsn() - restart_lsn, 0)::bigint FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&r); err == nil && r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// gatedRows is "key|md5(row)" of the table's rows in the moving ranges,
// sorted.
func gatedRows(t *testing.T, db *pgtest.DB, tb tableset.Table) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), "SELECT x.id::text || '|' || md5(x::text) FROM "+tb.Quoted()+" AS x WHERE "+ring.Predicate(tb.TokenSQL("x"), gatedRanges))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func diffSorted(a, b []string) (onlyA, onlyB []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && strings.Compare(a[i], b[j]) < 0):
			onlyA = append(onlyA, a[i])
			i++
		case i == len(a) || strings.Compare(b[j], a[i]) < 0:
			onlyB = append(onlyB, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return
}

// A copy beside its stream registers its units before any chunk, and every
// chunk's end is on the target while the chunk is between its read and its
// write (readGated records it before the read): the gate then holds a key
// in it and skips one past it, and the last chunk holds every key past the
// committed position. A copy not run beside its stream is refused by the
// gate rather than taken as not started.
func TestGatedCopyRecordsEachChunkBeforeItsRead(t *testing.T) {
	ctx := context.Background()
	src, dst, set := gatedUsers(ctx, t, `INSERT INTO gorders SELECT g, g, g FROM generate_series(1, 1000) g`)
	order, err := cdc.NewKeyOrder(set.Tables[0])
	if err != nil {
		t.Fatal(err)
	}
	whole := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	var seen []string
	afterGatedRead = func() {
		prog, err := cdc.ReadCopyProgress(ctx, dst.Pool, "recorded")
		if err != nil {
			t.Error(err)
			return
		}
		p := prog["public.gusers"]
		hold, _ := p.Decide(order, []string{"1000"})
		first, _ := p.Decide(order, []string{"1"})
		// The copied position depends on how far the writer is behind
		// the reader (it reads a chunk ahead); the chunk being read is
		// recorded whatever it is.
		// So is key 1's verdict past the first chunk: apply once that
		// chunk is committed, hold before.
		if len(seen) > 0 && first == cdc.GateHold {
			first = cdc.GateApply
		}
		seen = append(seen, fmt.Sprintf("reading %v all %v: key 1 %s, key 1000 %s", p.ReadingTo, p.ReadingAll, first, hold))
	}
	t.Cleanup(func() { afterGatedRead = nil })
	if _, err := Copy(ctx, src.Pool, dst.Pool, Options{Move: "recorded", Set: set, Ranges: whole, ChunkRows: 400, StreamDuringCopy: true}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"reading [400] all false: key 1 hold, key 1000 skip",
		"reading [800] all false: key 1 apply, key 1000 skip",
		"reading [800] all true: key 1 apply, key 1000 hold",
	}
	if !slices.Equal(seen, want) {
		t.Errorf("the progress as each chunk was read:\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	prog, err := cdc.ReadCopyProgress(ctx, dst.Pool, "recorded")
	if err != nil || !prog["public.gusers"].Done {
		t.Errorf("after the copy: %+v %v, want done", prog, err)
	}
	if d, _ := prog["public.gusers"].Decide(order, []string{"5000"}); d != cdc.GateApply {
		t.Errorf("a key past the table's end after the copy: %s, want apply", d)
	}

	// A copy not run beside its stream: paged by token, a unit per range.
	afterGatedRead = nil
	if _, err := Copy(ctx, src.Pool, dst.Pool, Options{Move: "plain", Set: set, Ranges: []ring.Range{{Lo: ring.MinToken, Hi: 0}, {Lo: 1 << 62, Hi: ring.MaxToken}}, Order: OrderToken, ChunkRows: 400}); err != nil {
		t.Fatal(err)
	}
	if _, err := cdc.ReadCopyProgress(ctx, dst.Pool, "plain"); err == nil || !strings.Contains(err.Error(), "pages public.gusers by token") {
		t.Errorf("the gate over a copy paged by token: %v, want a refusal", err)
	}
}

// A copy beside its stream that ends at Options.Until stops between
// chunks: every chunk whose read started is committed, so the stream holds
// no key while no copy runs (a copy slice ended by its context leaves the
// chunk it was reading marked, and the stream holds its keys until the
// next slice). The next run finishes the copy.
func TestGatedCopyEndsBetweenChunks(t *testing.T) {
	ctx := context.Background()
	src, dst, set := gatedUsers(ctx, t, "")
	order, err := cdc.NewKeyOrder(set.Tables[0])
	if err != nil {
		t.Fatal(err)
	}
	// Each chunk's read is slow, and the reader reads a chunk ahead of the
	// writer: a chunk is being read nearly all the time.
	afterGatedRead = func() { time.Sleep(40 * time.Millisecond) }
	t.Cleanup(func() { afterGatedRead = nil })
	whole := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	opts := Options{Move: "until", Set: set, Ranges: whole, ChunkRows: 50, StreamDuringCopy: true}
	held := func() (holds []string, copied []string) { return heldKeys(ctx, t, dst, "until", order) }
	for slice := 1; slice <= 3; slice++ {
		o := opts
		o.Until = time.Now().Add(150 * time.Millisecond)
		_, err := Copy(ctx, src.Pool, dst.Pool, o)
		if !errors.Is(err, ErrUntil) {
			t.Fatalf("slice %d: %v, want ErrUntil", slice, err)
		}
		holds, copied := held()
		if len(holds) > 0 {
			t.Fatalf("slice %d ended with the stream holding %d keys (%s..%s) past the copied %v: a chunk was left in flight", slice, len(holds), holds[0], holds[len(holds)-1], copied)
		}
		if copied == nil {
			t.Fatalf("slice %d copied nothing", slice)
		}
		t.Logf("slice %d: copied to %v, nothing held", slice, copied)
	}
	if _, err := Copy(ctx, src.Pool, dst.Pool, opts); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := dst.Pool.QueryRow(ctx, `SELECT count(*) FROM gusers`).Scan(&n); err != nil || n != 1000 {
		t.Fatalf("target rows %d (%v), want 1000", n, err)
	}
}

// A copy whose Options.Stop closes (a copy slice cut by a pause or a
// rollback) ends at once, though its throttle has it wait a second for
// each chunk, and between chunks: beside its stream no chunk is left for
// the stream to hold while the copy is paused, and without it no chunk's
// commit is cut (the server may complete a cut COMMIT after the rollback
// deleted the copy; a chunk read and still waiting for its throttle is
// dropped, as at a slice's end, so here such a slice copies nothing). The
// next run copies the rest: nothing twice (the rows
// it copies are the ones left), nothing skipped. Before Stop, a cut slice
// ran to its Until (here 3 s; a copy after its stream has no Until: the
// slice's deadline).
func TestCopyStopsBetweenChunks(t *testing.T) {
	for _, gated := range []bool{true, false} {
		t.Run(fmt.Sprintf("gated=%v", gated), func(t *testing.T) {
			ctx := context.Background()
			src, dst, set := gatedUsers(ctx, t, "")
			order, err := cdc.NewKeyOrder(set.Tables[0])
			if err != nil {
				t.Fatal(err)
			}
			whole := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
			var copied int64
			for slice := 1; slice <= 2; slice++ {
				stop := make(chan struct{})
				timer := time.AfterFunc(300*time.Millisecond, func() { close(stop) })
				sctx, cancel := context.WithTimeout(ctx, 3*time.Second) // the slice's deadline
				start := time.Now()
				st, err := Copy(sctx, src.Pool, dst.Pool, Options{Move: "stop", Set: set, Ranges: whole, ChunkRows: 50, StreamDuringCopy: gated,
					RowsPerSec: 50, Until: time.Now().Add(3 * time.Second), Stop: stop})
				took := time.Since(start)
				cancel()
				timer.Stop()
				if !errors.Is(err, ErrUntil) {
					t.Fatalf("slice %d: %v after %s, want ErrUntil", slice, err, took.Round(time.Millisecond))
				}
				if took > 1500*time.Millisecond {
					t.Fatalf("slice %d ended %s after its start, its Stop closed at 300ms", slice, took.Round(time.Millisecond))
				}
				var progress string
				if gated {
					holds, copiedTo := heldKeys(ctx, t, dst, "stop", order)
					if len(holds) > 0 {
						t.Fatalf("slice %d stopped with the stream holding keys %v (copied to %v): a chunk was left in flight", slice, holds[:min(len(holds), 5)], copiedTo)
					}
					progress = fmt.Sprintf(", copied to %v, nothing held", copiedTo)
				}
				var n int64
				if err := dst.Pool.QueryRow(ctx, `SELECT count(*) FROM gusers`).Scan(&n); err != nil || n != copied+st.Rows || gated && st.Rows == 0 {
					t.Fatalf("slice %d: %d rows on the target (%v), %d before and %d counted by the slice", slice, n, err, copied, st.Rows)
				}
				copied += st.Rows
				t.Logf("slice %d: %d rows in %s%s", slice, st.Rows, took.Round(time.Millisecond), progress)
			}
			st, err := Copy(ctx, src.Pool, dst.Pool, Options{Move: "stop", Set: set, Ranges: whole, ChunkRows: 500, StreamDuringCopy: gated})
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			if err := dst.Pool.QueryRow(ctx, `SELECT count(*) FROM gusers`).Scan(&n); err != nil || n != 1000 || copied+st.Rows != 1000 {
				t.Fatalf("target rows %d (%v), want 1000; the stopped slices copied %d, the last run %d", n, err, copied, st.Rows)
			}
		})
	}
}

// TestGatedCopyRefusesAColumnItDoesNotRead: a column added on the source
// after the copy read the tables' columns stops the gated copy with a
// SchemaMovedError at its next chunk, and a copy that reads the columns
// again carries the new column's values. Without the check the gated copy
// went on without the column: the gate skips a change to a key not yet
// copied, so an application's write to the new column before the chunk's
// read was lost (make e2e 2026-12-04, TestSchemaApplyInEveryPhase with the
// stream during the copy: 4 users rows different at VERIFY).
func TestGatedCopyRefusesAColumnItDoesNotRead(t *testing.T) {
	ctx := context.Background()
	src, dst, set := gatedUsers(ctx, t, "")
	whole := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	opts := Options{Move: "addcol", Set: set, Ranges: whole, ChunkRows: 400, StreamDuringCopy: true, Retries: -1}
	// The first chunk read, the column comes on both sides, and a write
	// to it lands on a key the copy has not read yet.
	var once sync.Once
	afterGatedRead = func() {
		once.Do(func() {
			dst.Exec(t, `ALTER TABLE gusers ADD COLUMN c1 text`)
			src.Exec(t, `ALTER TABLE gusers ADD COLUMN c1 text`)
			src.Exec(t, `UPDATE gusers SET c1 = 'v'||id WHERE id > 900`)
		})
	}
	t.Cleanup(func() { afterGatedRead = nil })
	_, err := Copy(ctx, src.Pool, dst.Pool, opts)
	var moved *SchemaMovedError
	if !errors.As(err, &moved) || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("the copy with a column added under it returned %v, want a SchemaMovedError naming c1", err)
	}
	afterGatedRead = nil
	if opts.Set, err = tableset.Introspect(ctx, src.Pool, gusersSpec, "source"); err != nil {
		t.Fatal(err)
	}
	opts.Retries = 0
	if _, err := Copy(ctx, src.Pool, dst.Pool, opts); err != nil {
		t.Fatal(err)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM gusers WHERE id > 900 AND c1 = 'v'||id`); n != 100 {
		t.Fatalf("%d of the 100 rows written in the new column reached the target, want 100", n)
	}
}

// gusersSpec is the set of the gated tests' gusers table.
var gusersSpec = tableset.Spec{Name: "g", Tables: []tableset.TableSpec{{Table: "gusers", KeyColumn: "id"}}}

// gatedUsers makes a source and a target of gatedDDL, loads 1,000 gusers
// rows (and runs load, if given) on the source and returns gusersSpec's set
// as the source has it.
func gatedUsers(ctx context.Context, t *testing.T, load string) (src, dst *pgtest.DB, set tableset.Set) {
	t.Helper()
	src, dst = pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, gatedDDL)
	dst.Exec(t, gatedDDL)
	src.Exec(t, `INSERT INTO gusers SELECT g, 'u'||g FROM generate_series(1, 1000) g`)
	if load != "" {
		src.Exec(t, load)
	}
	set, err := tableset.Introspect(ctx, src.Pool, gusersSpec, "source")
	if err != nil {
		t.Fatal(err)
	}
	return src, dst, set
}

// heldKeys lists the keys 1..1000 of gusers that the stream of move would
// hold (or could not decide) by its copy progress on dst, and how far the
// copy has copied.
func heldKeys(ctx context.Context, t *testing.T, dst *pgtest.DB, move string, order cdc.KeyOrder) (holds []string, copied []string) {
	t.Helper()
	prog, err := cdc.ReadCopyProgress(ctx, dst.Pool, move)
	if err != nil {
		t.Fatal(err)
	}
	p := prog["public.gusers"]
	for k := 1; k <= 1000; k++ {
		if d, err := p.Decide(order, []string{fmt.Sprint(k)}); err != nil || d == cdc.GateHold {
			holds = append(holds, fmt.Sprint(k))
		}
	}
	return holds, p.Copied
}
