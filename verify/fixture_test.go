package verify

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/cdctest"
	"github.com/reshard/reshard/testkit/pgtest"
)

// The world of the tests that verify under live writes: writers on the
// source, the move's publication and slot, its forward stream.

// liveWriters runs two writers (write) on src until the returned stop,
// which may be called more than once and is called when the test ends.
func liveWriters(t *testing.T, ctx context.Context, src *pgtest.DB, writes *atomic.Int64) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() { write(wctx, src, uint64(w), writes) })
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// slotOf creates move's publication of set's ranges and its slot on src,
// and returns their names and the slot's consistent point.
func slotOf(t *testing.T, ctx context.Context, src *pgtest.DB, move string, set tableset.Set, ranges []ring.Range) (cdc.Names, pglogrepl.LSN) {
	t.Helper()
	names := cdctest.Publication(t, ctx, src, move, set, ranges)
	l0 := cdctest.Slot(t, ctx, src, names.Slot)
	return names, l0
}

// runStream runs move's forward stream, src to dst from l0, until the test
// ends; a stream that ends on anything but that cancel fails the test.
func runStream(t *testing.T, ctx context.Context, src, dst *pgtest.DB, move string, names cdc.Names, l0 pglogrepl.LSN, set tableset.Set, ranges []ring.Range) *cdc.Stream {
	t.Helper()
	stream, err := cdc.New(cdc.Options{Move: move, SourceReplicationDSN: src.ReplicationDSN(), TargetDSN: dst.DSN,
		Slot: names.Slot, Publication: names.Publication, Origin: names.Origin, StartLSN: l0, Set: set, Ranges: ranges,
		BatchDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	streamErr := make(chan error, 1)
	go func() { streamErr <- stream.Run(sctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-streamErr; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stream: %v", err)
		}
	})
	return stream
}
