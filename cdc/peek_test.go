package cdc

import (
	"testing"
	"time"

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
func forcePeek(e *env) {
	e.tweak = func(o *Options) {
		o.PeekCatchUpBytes, o.PeekBytes, o.PeekCheckInterval = 1, 64<<10, 100*time.Millisecond
	}
}

func peekName(move string, peek bool) string {
	if peek {
		return move + "_peek"
	}
	return move
}

// assertPeeked fails unless s caught up by SQL peeks more than once: a
// forced test that only streamed proves nothing about them.
func assertPeeked(t *testing.T, s *Stream, peek bool) {
	t.Helper()
	if !peek {
		return
	}
	var m dto.Metric
	if err := s.mPeeks.Write(&m); err != nil {
		t.Fatal(err)
	}
	n := m.GetCounter().GetValue()
	if n < 2 {
		t.Errorf("the stream peeked %v times; forced, it should have peeked often", n)
	}
	t.Logf("SQL peeks: %v", n)
}
