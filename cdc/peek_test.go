package cdc

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	dto "github.com/prometheus/client_model/go"
)

// The stream tests again, with every stream catching up by SQL peeks
// whenever it is behind at all (forcePeek): each switches between peeks and
// the walsender many times, under live writes, killed connections and holds.
func TestPeekConvergesUnderLiveWrites(t *testing.T) { testConvergesUnderLiveWrites(t, true) }
func TestPeekCrashResume(t *testing.T)              { testCrashResume(t, true) }
func TestPeekHoldAtUnderLiveWrites(t *testing.T)    { testHoldAtUnderLiveWrites(t, true) }

// forcePeek: a stream of e peeks when it is one byte behind, looks every
// 100ms and peeks 64 kB of WAL at a time (or twice the slot's restart lag).
// It logs to the buffer returned.
func forcePeek(e *env) *logBuffer {
	logs := &logBuffer{}
	e.tweak = func(o *Options) {
		o.PeekCatchUpBytes, o.PeekBytes, o.PeekCheckInterval = 1, 64<<10, 100*time.Millisecond
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	return logs
}

func peekName(move string, peek bool) string {
	if peek {
		return move + "_peek"
	}
	return move
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

// assertPeeked fails unless s caught up by SQL peeks more than once: a
// forced test that only streamed proves nothing about them.
func assertPeeked(t *testing.T, s *Stream, peek bool) {
	t.Helper()
	if !peek {
		return
	}
	n := peeks(t, s)
	if n < 2 {
		t.Errorf("the stream peeked %v times; forced, it should have peeked often", n)
	}
	t.Logf("SQL peeks: %v", n)
}

// A source that refuses the peek itself (here its temp_file_limit, which
// the peek's result outgrows) leaves the stream to the walsender: it still
// converges, and it did try.
func TestPeekRefusedStreamsInstead(t *testing.T) {
	e := newEnv(t, "refused", usersOnly...)
	logs := forcePeek(e)
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
	logs := forcePeek(e)
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
	stop := runStream(t, s)
	drain(t, e, s)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	assertConverged(t, e, owned)
	if !strings.Contains(logs.String(), "cdc transaction bigger than a SQL peek; streaming it") {
		t.Errorf("the big transaction was not left to the walsender:\n%s", logs.String())
	}
}
