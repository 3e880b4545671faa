package verify

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/internal/spread"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// ProbeOptions bound a probe of the verify's reads (Probe): capacity's
// sample.
type ProbeOptions struct {
	ChunkRows int // 0: DefaultChunkRows
	Parallel  int // workers a side, as Options.Parallel (0: 2), when there are no Targets
	// Targets are the target's side: a worker each (so len(Targets)
	// workers a side), each reading the rows its transaction holds.
	// Without them only the source is read.
	Targets []ProbeTarget
	// After a chunk a worker, no chunk starts once MinTime has passed and
	// those were checksummed, or once MaxTime has passed.
	MinTime, MaxTime time.Duration
}

// ProbeTarget is an open transaction on the target whose table holds
// moving rows of the table probed, made like it (capacity's copy probe,
// backfill.Probe, wrote them there and rolls them back afterwards).
type ProbeTarget struct {
	Tx    pgx.Tx
	Table pgx.Identifier
	Rows  int64 // how many it holds
}

// ProbeStats is what a probe checksummed: the moving rows read on each
// side, in Elapsed, and each side's time in its checksums (the mean over
// its workers): the side whose Busy is near Elapsed set the pace.
type ProbeStats struct {
	Rows, Chunks int64 // the source's
	// Planned is how many chunks the plan cut the source's moving rows
	// into; Taken the planned indexes of those checksummed, in the order
	// taken (spread.Order).
	Planned    int
	Taken      []int
	TargetRows int64
	Workers    int // a side
	Elapsed    time.Duration
	SourceBusy time.Duration
	TargetBusy time.Duration
}

// Probe times the verify's own reads of t's moving rows as Run does them:
// the chunks Run would plan on the source (a page sample), taken in an
// order that spreads them over the table (spread.Order: the first, the
// middle, a quarter, three quarters, ...), so that a probe of a few
// chunks meets the table's parts in proportion, its pages cached or not,
// rather than its first part alone (at 20 GB a probe of the first
// chunks, the pages loaded first, predicted 1m41s for a verify of 1m5s);
// each checksummed by Run's statement in a session of Run's (a dedicated
// connection, read-only REPEATABLE READ, no parallel workers), workers at
// once; and, with o.Targets, at the same time on the target the rows each
// target transaction holds, by the same statement over its table, a worker
// per transaction. Each worker checksums a source chunk and a target chunk
// side by side and starts its next pair when both are done, as Run's
// workers do, so the pair runs at the pace of its slower side, and where
// the two servers share CPUs each side's reads slow the other's. The
// target's chunks are cut to the source's planned chunk size (the source's
// chunks to the target tables' size when they hold fewer rows), and read
// again from the first when they run out. It writes nothing.
func Probe(ctx context.Context, src *pgxpool.Pool, t tableset.Table, ranges []ring.Range, o ProbeOptions) (ProbeStats, error) {
	if o.ChunkRows <= 0 {
		o.ChunkRows = DefaultChunkRows
	}
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	var targets []ProbeTarget
	for _, pt := range o.Targets {
		if pt.Rows > 0 {
			targets = append(targets, pt)
		}
	}
	workers := o.Parallel
	if len(targets) > 0 {
		workers = len(targets)
	}
	st := ProbeStats{Workers: workers}
	q, err := newTableSQL(t, ranges)
	if err != nil {
		return st, err
	}
	chunkRows := o.ChunkRows
	for _, pt := range targets {
		chunkRows = min(chunkRows, int(pt.Rows))
	}
	bounds, err := planTable(ctx, src, q, chunkRows)
	if err != nil {
		return st, fmt.Errorf("probe the verify of %s: %w", t, err)
	}
	chunks := chunksOf(0, bounds)
	order := spread.Order(len(chunks))
	st.Planned = len(chunks)
	// The rows a source chunk is planned to hold, which each target chunk
	// holds too.
	perChunk := int64(chunkRows)
	var est float64
	if err := src.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, t.Quoted()).Scan(&est); err != nil {
		return st, fmt.Errorf("probe the verify of %s: %w", t, err)
	}
	if est > 0 {
		perChunk = max(int64(est*q.fraction())/int64(len(chunks)), 1)
	}
	sides, err := openSides(ctx, src, t, ranges, targets, workers, perChunk)
	defer func() {
		for _, s := range sides {
			s.src.close()
		}
	}()
	if err != nil {
		return st, err
	}

	var (
		mu               sync.Mutex
		next             int
		srcBusy, dstBusy time.Duration
	)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for w := range sides {
		s := sides[w]
		g.Go(func() error {
			for step := 0; ; step++ {
				mu.Lock()
				el := time.Since(start)
				enough := step > 0 && (st.Chunks >= int64(workers) && el >= o.MinTime || o.MaxTime > 0 && el >= o.MaxTime)
				if enough || next >= len(chunks) {
					mu.Unlock()
					return nil
				}
				c := chunks[order[next]]
				next++
				st.Taken = append(st.Taken, c.index)
				mu.Unlock()
				var (
					sRows, dRows int64
					sTook, dTook time.Duration
				)
				pair, pctx := errgroup.WithContext(gctx)
				pair.Go(func() (err error) {
					if sRows, sTook, err = checksumRows(pctx, s.src.tx, q, c); err != nil {
						return fmt.Errorf("probe the verify of %s: checksum chunk %d %s on the source: %w", t, c.index, interval(c.lo, c.hi), err)
					}
					return nil
				})
				if s.dst != nil {
					dc := s.chunks[step%len(s.chunks)]
					pair.Go(func() (err error) {
						if dRows, dTook, err = checksumRows(pctx, s.dst.Tx, s.dq, dc); err != nil {
							return fmt.Errorf("probe the verify of %s: checksum %s %s on the target: %w", t, s.dst.Table.Sanitize(), interval(dc.lo, dc.hi), err)
						}
						return nil
					})
				}
				if err := pair.Wait(); err != nil {
					return err
				}
				mu.Lock()
				st.Rows += sRows
				st.TargetRows += dRows
				st.Chunks++
				srcBusy += sTook
				dstBusy += dTook
				st.Elapsed = time.Since(start)
				mu.Unlock()
			}
		})
	}
	err = g.Wait()
	st.SourceBusy, st.TargetBusy = srcBusy/time.Duration(workers), dstBusy/time.Duration(workers)
	return st, err
}

// probeSide is what one of Probe's workers reads: a source session, and
// a target transaction with its table's query and chunks (none without
// targets).
type probeSide struct {
	src    *readTx
	dst    *ProbeTarget
	dq     *tableSQL
	chunks []chunk
}

// openSides opens a source session per worker and cuts each target's
// rows into chunks of perChunk rows. The caller closes the sessions
// returned, on error too.
func openSides(ctx context.Context, src *pgxpool.Pool, t tableset.Table, ranges []ring.Range, targets []ProbeTarget, workers int, perChunk int64) ([]probeSide, error) {
	sides := make([]probeSide, 0, workers)
	for w := range workers {
		r, err := begin(ctx, src, "")
		if err != nil {
			return sides, fmt.Errorf("probe the verify of %s: open a source session: %w", t, err)
		}
		sides = append(sides, probeSide{src: r})
		if len(targets) == 0 {
			continue
		}
		pt := &targets[w]
		dq, err := newTableSQL(t, ranges)
		if err != nil {
			return sides, err
		}
		dq.from = pt.Table.Sanitize() + " AS t"
		// As Run's sessions (dial).
		if _, err := pt.Tx.Exec(ctx, verifySessionSQL); err != nil {
			return sides, fmt.Errorf("probe the verify of %s on the target: %w", t, err)
		}
		b, err := cut(ctx, pt.Tx, dq, pt.Rows, perChunk)
		if err != nil {
			return sides, fmt.Errorf("probe the verify of %s: cut %s into chunks: %w", t, pt.Table.Sanitize(), err)
		}
		sides[w].dst, sides[w].dq, sides[w].chunks = pt, dq, chunksOf(0, b)
	}
	return sides, nil
}

// cut returns the bounds that split the rows of q's table in tx (rows of
// them) into chunks of about per rows: ceil(rows/per) chunks of equal
// size.
func cut(ctx context.Context, tx pgx.Tx, q *tableSQL, rows, per int64) ([][]string, error) {
	n := (rows + per - 1) / per
	if n <= 1 {
		return nil, nil
	}
	r, err := tx.Query(ctx, `SELECT k FROM (SELECT `+q.keyText()+` AS k, row_number() OVER (ORDER BY `+q.orderBy()+`) AS i FROM `+q.from+`) s
		WHERE i % $1 = 0 ORDER BY i`, (rows+n-1)/n)
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(r, pgx.RowTo[[]string])
	if err != nil {
		return nil, err
	}
	if int64(len(keys)) >= n { // the last key closes the last chunk: open instead
		keys = keys[:n-1]
	}
	return keys, nil
}

// checksumRows runs the chunk checksum of c in tx: the rows it read and
// how long it took.
func checksumRows(ctx context.Context, tx pgx.Tx, q *tableSQL, c chunk) (int64, time.Duration, error) {
	start := time.Now()
	ds, err := digests(ctx, tx, q, c.lo, c.hi)
	if err != nil {
		return 0, 0, err
	}
	return total(ds).n, time.Since(start), nil
}
