package cdc

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dto "github.com/prometheus/client_model/go"
)

// The stream tests again, with every stream catching up by SQL whenever it
// is behind at all (forcePeek): each switches between SQL and the walsender
// many times, under live writes, killed connections and holds; reading a
// temporary copy of the slot ahead of the applier, and peeking the slot
// itself one read at a time (as when the source has no slot to spare).
func TestPeekConvergesUnderLiveWrites(t *testing.T) { testConvergesUnderLiveWrites(t, readAhead) }
func TestPeekCrashResume(t *testing.T)              { testCrashResume(t, readAhead) }
func TestPeekHoldAtUnderLiveWrites(t *testing.T)    { testHoldAtUnderLiveWrites(t, readAhead) }
func TestSerialPeekConvergesUnderLiveWrites(t *testing.T) {
	testConvergesUnderLiveWrites(t, serialPeek)
}
func TestSerialPeekCrashResume(t *testing.T)           { testCrashResume(t, serialPeek) }
func TestSerialPeekHoldAtUnderLiveWrites(t *testing.T) { testHoldAtUnderLiveWrites(t, serialPeek) }

// peekMode is how a test's stream catches up.
type peekMode int

const (
	streamOnly peekMode = iota // the defaults: a test stream is never far enough behind to peek
	readAhead                  // SQL, reading a copy of the slot ahead
	serialPeek                 // SQL, peeking the slot itself
)

// forcePeek: unless mode is streamOnly, a stream of e reads by SQL when it
// is one byte behind, looks every 100ms and reads 64 kB of WAL at a time (or
// twice the slot's restart lag). It logs to the buffer returned (also
// e.peekLogs).
func forcePeek(e *env, mode peekMode) *logBuffer {
	if mode == streamOnly {
		return nil
	}
	logs := &logBuffer{}
	e.tweak = func(o *Options) {
		o.PeekCatchUpBytes, o.PeekBytes, o.PeekCheckInterval = 1, 64<<10, 100*time.Millisecond
		o.PeekInPlace = mode == serialPeek
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e.peekLogs = logs
	return logs
}

func peekName(move string, mode peekMode) string {
	return move + [...]string{"", "_peek", "_speek"}[mode]
}

// peeks is how many SQL peeks s made.
func peeks(t *testing.T, s *Stream) float64 {
	t.Helper()
	var m dto.Metric
	if err := s.mPeeks.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// assertPeeked fails unless s caught up by SQL more than once, in the way
// mode asks: a forced test that only streamed proves nothing about them.
func assertPeeked(t *testing.T, e *env, s *Stream, mode peekMode) {
	t.Helper()
	if mode == streamOnly {
		return
	}
	n := peeks(t, s)
	if n < 2 {
		t.Errorf("the stream peeked %v times; forced, it should have peeked often", n)
	}
	logs := e.peekLogs.String()
	ahead, serial := strings.Count(logs, "read_ahead=true"), strings.Count(logs, "read_ahead=false")
	if mode == readAhead && (ahead == 0 || serial > 0) || mode == serialPeek && (serial == 0 || ahead > 0) {
		t.Errorf("catch-ups reading a copy ahead: %d, peeking the slot: %d; mode %d wants only the other", ahead, serial, mode)
	}
	// A copy goes with its session: one whose Run was cancelled in a read
	// goes when the source sees the session closed.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n := e.src.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1`, e.names.Slot+"\\_p%")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d temporary copies of slot %s are left on the source", n, e.names.Slot)
			break
		}
	}
	t.Logf("SQL reads: %v in %d catch-ups (%d reading ahead)", n, ahead+serial, ahead)
}

// A source that refuses the peek itself (here its temp_file_limit, which
// the peek's result outgrows) leaves the stream to the walsender: it still
// converges, and it did try.
func TestPeekRefusedStreamsInstead(t *testing.T) {
	e := newEnv(t, "refused", usersOnly...)
	logs := forcePeek(e, readAhead)
	e.src.Exec(t, "ALTER DATABASE "+pgx.Identifier{e.src.Name}.Sanitize()+" SET work_mem = '64kB'")
	e.src.Exec(t, "ALTER DATABASE "+pgx.Identifier{e.src.Name}.Sanitize()+" SET temp_file_limit = '64kB'")
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	w := startWriter(t, e.src, false, 5)
	time.Sleep(time.Second) // a backlog bigger than 64 kB of peek result
	e.copyRanges(t)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := runStream(t, s)
	time.Sleep(time.Second)
	w.finish(t)
	drain(t, e, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, e, owned)
	if peeks(t, s) < 1 {
		t.Error("the stream never tried to peek")
	}
	if !strings.Contains(logs.String(), "SQL peek refused by the source; streaming instead") || !strings.Contains(logs.String(), "53400") {
		t.Errorf("no refused peek in the stream's log:\n%s", logs.String())
	}
}

// logBuffer is a log destination safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A transaction bigger than a peek is streamed by the walsender (in bounded
// memory), not peeked whole.
func TestPeekBigTransactionStreams(t *testing.T) {
	e := newEnv(t, "bigpeek", usersOnly...)
	logs := forcePeek(e, readAhead)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	// Some 5 MB of WAL in one transaction, against peeks of 64 kB.
	e.src.Exec(t, "UPDATE users SET balance = balance + 1, payload = "+bigSQL)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	applyToMarker(t, e, s)
	assertConverged(t, e, owned)
	if !strings.Contains(logs.String(), "cdc transaction bigger than a SQL peek; streaming it") {
		t.Errorf("the big transaction was not left to the walsender:\n%s", logs.String())
	}
}

// A backlog many reads long is read in spans by the feed's two readers in
// turn, each from its own copy of the slot: the spans meet without a gap
// (every transaction inserts a row of its own; a copy moved 3 kB too far
// fails here). Each also updates the row of the one before, which a
// transaction applied twice would undo: those the spans overlap on (a copy
// moved 3 kB short) are skipped by their position.
func TestPeekSpansMeet(t *testing.T) { testSpansMeet(t, false) }

// A source with one slot to spare, not two, is read in spans by one reader
// from one copy.
func TestPeekOneCopySpansMeet(t *testing.T) { testSpansMeet(t, true) }

func testSpansMeet(t *testing.T, oneSpare bool) {
	e := newEnv(t, "spans", usersOnly...)
	logs := forcePeek(e, readAhead)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	if oneSpare {
		free := e.src.QueryInt64(t, `SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`)
		e.src.Exec(t, `SELECT pg_create_physical_replication_slot('spans_fill_' || g) FROM generate_series(1, $1::int) g`, free-1)
		t.Cleanup(func() {
			_, _ = e.src.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'spans_fill_%'`)
		})
	}
	e.copyRanges(t)
	e.src.Exec(t, `DO $$ BEGIN
		FOR i IN 1..10000 LOOP
			INSERT INTO users VALUES (10000000 + i, 'chain', 0, 'c');
			UPDATE users SET balance = 1 WHERE id = 10000000 + i - 1;
			COMMIT;
		END LOOP;
	END $$`)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	applyToMarker(t, e, s)
	assertConverged(t, e, owned)
	reads := map[string]int{}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `msg="cdc SQL read"`) {
			reads[l[strings.Index(l, "reader="):][:len("reader=0")]]++
		}
	}
	t.Logf("reads by reader: %v", reads)
	refused := strings.Contains(logs.String(), "to read ahead of the applier; reading it with 1 of 2 copies")
	switch {
	case oneSpare && (reads["reader=0"] < 3 || reads["reader=1"] > 0 || !refused):
		t.Errorf("reads by reader: %v, second copy refused: %v; one slot to spare should give one reader, reading the backlog in turns", reads, refused)
	case !oneSpare && (reads["reader=0"] < 2 || reads["reader=1"] < 1 || refused):
		t.Errorf("reads by reader: %v; the backlog should have taken turns of both readers, the first twice", reads)
	}
}

// A reader's session killed in the middle of a catch-up (its copy goes with
// it) fails the Run, which resumes from the target's origin and converges;
// the other reader's copy goes when the Run stops.
func TestPeekReaderKilled(t *testing.T) {
	e := newEnv(t, "readerkill", usersOnly...)
	forcePeek(e, readAhead)
	seedSource(t, e)
	owned := seedTargetOwned(t, e)
	e.createSlot(t)
	e.copyRanges(t)
	w := startWriter(t, e.src, false, 3)
	s, err := New(e.options())
	if err != nil {
		t.Fatal(err)
	}
	stop := supervise(t, s)
	killed := int64(0)
	for deadline := time.Now().Add(10 * time.Second); killed < 2 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		killed += e.src.QueryInt64(t, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots
			WHERE slot_name LIKE $1 AND active_pid IS NOT NULL`, e.names.Slot+"\\_p%")
		if killed == 1 {
			time.Sleep(300 * time.Millisecond) // the next kill in another catch-up
		}
	}
	w.finish(t)
	if killed < 2 {
		t.Fatalf("killed %d reader sessions in 10 s; the stream should have caught up by SQL often", killed)
	}
	time.Sleep(time.Second) // the Run that lost its reader fails; supervise starts the next (a drain waiting then fails with it)
	drain(t, e, s)
	stop()
	assertConverged(t, e, owned)
	for _, l := range strings.Split(e.peekLogs.String(), "\n") {
		if strings.Contains(l, "could not copy") || strings.Contains(l, "level=WARN") {
			t.Log(l)
		}
	}
	assertPeeked(t, e, s, readAhead)
}

// A catch-up whose span takes a while to apply (here a target trigger
// that sleeps 2 ms a row; a copy gate reading the copy's progress per
// transaction does the same) moves the slot with what it commits, every
// StatusInterval, not only once the span is applied: the slot's confirmed
// position is seen inside the backlog's first three quarters, which the
// span ends after. (Before, it stayed at its start until the span's end,
// and a stream applying one span during a whole copy held the slot:
// backfill's TestStreamDuringCopyLosesNothing in CI, 2026-12-04.)
func TestPeekAdvancesTheSlotWithinASpan(t *testing.T) {
	e := newEnv(t, "peekfollow", usersOnly...)
	logs := forcePeek(e, readAhead)
	e.src.Exec(t, "INSERT INTO users SELECT g, 'u'||g, g, 'p' FROM generate_series(1, 600) g")
	e.createSlot(t)
	e.copyRanges(t)
	e.dst.Exec(t, `CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$;
		CREATE TRIGGER slow BEFORE INSERT OR UPDATE ON users FOR EACH ROW EXECUTE FUNCTION slow();
		ALTER TABLE users ENABLE ALWAYS TRIGGER slow`) // fires for the applier's replica role too
	backlog := `DO $$ BEGIN
		FOR i IN %d..%d LOOP
			UPDATE users SET balance = balance + 1 WHERE id = i;
			COMMIT;
		END LOOP;
	END $$`
	e.src.Exec(t, fmt.Sprintf(backlog, 1, 450))
	mid := e.src.QueryInt64(t, `SELECT pg_current_wal_lsn() - '0/0'`)
	e.src.Exec(t, fmt.Sprintf(backlog, 451, 600))
	// A read stops at the source's flushed WAL, which the test servers'
	// asynchronous commits leave some 120 kB short of the backlog's end
	// for a moment: a catch-up then read nothing and the walsender applied
	// the backlog, advancing the slot as it went.
	end := e.src.QueryInt64(t, `SELECT pg_current_wal_insert_lsn() - '0/0'`)
	for deadline := time.Now().Add(10 * time.Second); e.src.QueryInt64(t, `SELECT pg_current_wal_flush_lsn() - '0/0'`) < end; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the source did not flush its WAL in 10 s")
		}
	}
	start := e.src.QueryInt64(t, `SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = $1`, e.names.Slot)
	o := e.options()
	o.PeekBytes = 256 << 20 // the whole backlog in one span
	o.BatchRows, o.StatusInterval = 50, 100*time.Millisecond
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	var seen []int64
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			var c int64
			if err := e.src.Pool.QueryRow(watchCtx, `SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots WHERE slot_name = $1`, e.names.Slot).Scan(&c); err == nil && (len(seen) == 0 || c != seen[len(seen)-1]) {
				seen = append(seen, c)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t0 := time.Now()
	applyToMarker(t, e, s)
	stopWatch()
	<-watched
	// The Run starts by SQL, the backlog and the marker behind it: one
	// read (PeekBytes) covers them, and the marker may be drained before
	// the catch-up ends.
	if !strings.HasPrefix(logs.String(), "time=") || !strings.Contains(strings.SplitN(logs.String(), "\n", 2)[0], "cdc catching up by SQL peeks") {
		t.Fatalf("the stream did not start by catching up by SQL:\n%s", logs.String())
	}
	within := 0
	for _, c := range seen {
		if c > start && c <= mid {
			within++
		}
	}
	t.Logf("applied in %s; the slot confirmed %d positions past its start, %d of them within the backlog's first three quarters (start %d, three quarters %d, seen %v)",
		time.Since(t0).Round(time.Millisecond), len(seen)-1, within, start, mid, seen)
	if within == 0 {
		t.Errorf("the slot's confirmed position went from %d past the backlog's first three quarters (%d) at once: %v; it did not follow the span's commits", start, mid, seen)
	}
}
