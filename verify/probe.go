package verify

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// ProbeOptions bound a probe of the verify's reads (ProbeSource):
// capacity's sample.
type ProbeOptions struct {
	ChunkRows int // 0: DefaultChunkRows
	Parallel  int // workers, as Options.Parallel (0: 2)
	// After a chunk a worker, no chunk starts once MinTime has passed and
	// those were checksummed, or once MaxTime has passed.
	MinTime, MaxTime time.Duration
}

// ProbeStats is what a probe checksummed.
type ProbeStats struct {
	Rows, Chunks int64
	Workers      int
	Elapsed      time.Duration
}

// ProbeSource times the verify's own reads of t's moving rows on the
// source: the chunks Run would plan (a page sample of the source), each
// checksummed by Run's statement, Parallel at once, each in a read-only
// transaction. The target's side, which Run reads at the same time, is
// not read (at PLAN it holds none of the rows). It writes nothing.
func ProbeSource(ctx context.Context, src *pgxpool.Pool, t tableset.Table, ranges []ring.Range, o ProbeOptions) (ProbeStats, error) {
	if o.ChunkRows <= 0 {
		o.ChunkRows = DefaultChunkRows
	}
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	st := ProbeStats{Workers: o.Parallel}
	q, err := newTableSQL(t, ranges)
	if err != nil {
		return st, err
	}
	bounds, err := planTable(ctx, src, q, o.ChunkRows)
	if err != nil {
		return st, fmt.Errorf("probe the verify of %s: %w", t, err)
	}
	chunks := chunksOf(0, bounds)
	var mu sync.Mutex
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Parallel)
	for i, c := range chunks {
		if i >= o.Parallel { // a chunk a worker, whatever the bounds
			el := time.Since(start)
			mu.Lock()
			enough := st.Chunks >= int64(o.Parallel) && el >= o.MinTime || o.MaxTime > 0 && el >= o.MaxTime
			mu.Unlock()
			if enough {
				break
			}
		}
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			tx, err := src.BeginTx(gctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(gctx)) }()
			ds, err := digests(gctx, tx, q, c.lo, c.hi)
			if err != nil {
				return fmt.Errorf("probe the verify of %s: checksum chunk %d %s: %w", t, c.index, interval(c.lo, c.hi), err)
			}
			mu.Lock()
			defer mu.Unlock()
			st.Rows += total(ds).n
			st.Chunks++
			st.Elapsed = time.Since(start)
			return nil
		})
	}
	err = g.Wait()
	return st, err
}
