package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// DefaultChunkRows is the moving rows per chunk of Options{} (the
// migration's default, workflows.DefaultVerifyChunkRows: cmd/reshard's
// TestKnobsAgree checks they agree).
const DefaultChunkRows = 50_000

// Options configure one verification.
type Options struct {
	// RunID names the run; its plan and verified chunks are recorded on the
	// target (reshard.verify_run, reshard.verify_chunk) and a later call with
	// the same id continues where it stopped. Empty: nothing is written
	// anywhere and nothing resumes.
	RunID string
	// Set is the table set as read from the SOURCE (tableset.Introspect):
	// the source's column order is the canonical column order of the row
	// text on both sides, columns taken by name, so the target's physical
	// column order does not matter.
	Set tableset.Set
	// TargetSet is the same tables as read from the target (empty: not
	// checked). While a column is on one side only, or typed differently
	// (a schema change on its way), Run compares nothing and returns a
	// retryable *tableset.ColumnWaitError naming it: verify never passes
	// over a column it did not compare.
	TargetSet tableset.Set
	// Source and Target name the shards in messages.
	Source, Target string
	Ranges         []ring.Range
	// ChunkRows is the target number of moving rows per chunk (0:
	// DefaultChunkRows).
	ChunkRows int
	// BisectRows: a mismatching interval with at most this many rows on
	// either side is compared row by row (default 1000, at least 16).
	BisectRows int
	// Parallel bounds the chunks compared at once (default 2); each worker
	// holds one connection per side.
	Parallel int
	// RowsPerSecond throttles the rows read per side; 0 means no limit.
	RowsPerSecond float64
	// Throttle, when set, is waited on for the rows read per side instead
	// of RowsPerSecond (a backfill.Throttle, which an adaptive throttle
	// steers).
	Throttle Throttle
	// MaxSampleKeys bounds the keys listed per chunk (default 20); counts
	// are always exact.
	MaxSampleKeys int
	// Holder holds the CDC applier at the source snapshot's LSN while the
	// target snapshot is taken. Nil only when the source is quiescent: then
	// a concurrent write can show up as a false mismatch.
	Holder Holder
	// Recheck: the run's verified chunks are older than changes made since
	// (an aborted cutover's among them). The chunks those changes touched
	// are compared again, the others stand; the Holder must be the move's
	// stream (Witness), which says what changed, and the comparison is at a
	// point without a replication slot, which a long transaction on the
	// source does not hold up (recheck.go).
	Recheck bool
	// Primary, when set, says that the source pool is a streaming standby
	// of this server, the source shard's primary: the source's side is read
	// on the standby at a replay position it reaches after the primary's
	// current one, with the applier held there (standby.go). Not with
	// Recheck, which reads the primary's WAL position beside its snapshot.
	Primary *pgxpool.Pool
	Metrics *Metrics
	Logger  *slog.Logger
	// Progress, when set, is called after every chunk, from the worker that
	// compared it (so concurrently when Parallel > 1); chunks accepted from
	// an earlier attempt are not reported here.
	Progress func(ChunkReport)
	// Planned, when set, is called once the run's chunks are known, before
	// any is compared: how many there are, and how many of them (with how
	// many rows) an earlier attempt verified (a progress bar's total).
	Planned func(PlanInfo)
}

// PlanInfo is the size of a run's plan (Options.Planned).
type PlanInfo struct {
	Chunks     int
	Reused     int
	ReusedRows int64
}

// Throttle lets rows pass at its rate; it returns when they may, or when
// ctx ends.
type Throttle interface {
	Wait(ctx context.Context, rows, bytes int) (time.Duration, error)
}

func (o Options) withDefaults() (Options, error) {
	if o.ChunkRows <= 0 {
		o.ChunkRows = DefaultChunkRows
	}
	if o.BisectRows <= 0 {
		o.BisectRows = 1000
	}
	o.BisectRows = max(o.BisectRows, 16)
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	if o.MaxSampleKeys <= 0 {
		o.MaxSampleKeys = 20
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if len(o.Set.Tables) == 0 {
		return o, errors.New("verify: the table set has no tables")
	}
	if len(ring.Normalize(o.Ranges)) == 0 {
		return o, errors.New("verify: no token range to verify")
	}
	if o.Recheck && o.Primary != nil {
		return o, errors.New("verify: a re-check reads the source's primary, not a standby: pass the primary as the source and no Options.Primary")
	}
	if o.RowsPerSecond < 0 {
		return o, fmt.Errorf("verify: rows per second %v is negative", o.RowsPerSecond)
	}
	return o, nil
}

// Run compares the moving rows of every table of opts.Set on src and dst.
// A mismatch is not an error: it is in the report (Report.OK). Errors are
// failures to compare at all.
//
// Resuming a run accepts the chunks an earlier attempt verified, although
// that attempt read both sides at an older LSN. That is sound for what verify
// proves: each chunk is shown equal on both sides at one LSN at or after the
// run started, and the chunks cover the whole key space of every table (the
// plan is fixed when the run starts and open at both ends). Past its
// verification LSN a chunk depends on the applier, exactly as the chunks
// already compared within one uninterrupted attempt do once the attempt moves
// on — no verification covers writes after its own snapshot, and cutover's
// drain-to-marker is what covers those. Re-checking finished chunks would
// make a crash-looping verify of a large table never finish (Vitess VDiff
// resumes the same way). A chunk that mismatched is never accepted: the next
// attempt compares it again and lists its keys.
func Run(ctx context.Context, src, dst *pgxpool.Pool, opts Options) (*Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := agree(opts); err != nil {
		return nil, err
	}
	qs := make([]*tableSQL, len(opts.Set.Tables))
	for i, t := range opts.Set.Tables {
		if qs[i], err = newTableSQL(t, opts.Ranges); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	chunks, err := plan(ctx, src, dst, opts.RunID, qs, opts.Ranges, opts.ChunkRows)
	if err != nil {
		return nil, err
	}
	rep := &Report{RunID: opts.RunID, Ranges: ring.Normalize(opts.Ranges), Started: started, Tables: make([]TableReport, len(qs))}
	var (
		snaps *snapshots
		redo  map[[2]int]bool
	)
	if opts.Recheck {
		if opts.RunID == "" {
			return nil, errors.New("verify: a re-check needs the run id of the verify it re-checks")
		}
		if snaps, redo, err = recheckChunks(ctx, src, dst, opts, qs, chunks); err != nil {
			return nil, err
		}
		defer snaps.close()
	}
	var todo []chunk
	for i, q := range qs {
		rep.Tables[i] = TableReport{Table: q.t.String(), PK: q.t.PK, Chunks: make([]ChunkReport, len(chunks[i]))}
		for j, c := range chunks[i] {
			if c.index != j {
				return nil, fmt.Errorf("verify run %q: chunks of %s are not numbered 0..%d: use a new run id", opts.RunID, q.t, len(chunks[i])-1)
			}
			if c.done == nil || redo[[2]int{i, c.index}] {
				todo = append(todo, c)
				continue
			}
			cr := resumed(q, c)
			rep.Tables[i].Chunks[j] = cr
			opts.Metrics.chunk(cr)
		}
	}
	if opts.Planned != nil {
		info := PlanInfo{}
		for i := range rep.Tables {
			for _, c := range rep.Tables[i].Chunks {
				info.Chunks++
				if c.Resumed {
					info.Reused++
					info.ReusedRows += c.Rows
				}
			}
		}
		opts.Planned(info)
	}
	if len(todo) > 0 {
		if err := compareAll(ctx, src, dst, opts, qs, todo, rep, snaps, nil); err != nil {
			return nil, err
		}
	}
	rep.Duration = time.Since(started)
	for i := range rep.Tables {
		summarize(&rep.Tables[i], qs[i].ranges)
		for _, c := range rep.Tables[i].Chunks {
			if c.Resumed {
				rep.ReusedRows += c.Rows
				if rep.ReusedAt.IsZero() || c.VerifiedAt.Before(rep.ReusedAt) {
					rep.ReusedAt, rep.ReusedLSN = c.VerifiedAt, c.LSN
				}
			} else {
				rep.Rows += c.Rows
			}
		}
	}
	if s := rep.Duration.Seconds(); s > 0 {
		rep.RowsPerSecond = float64(rep.Rows) / s
	}
	if rep.Rows+rep.ReusedRows == 0 {
		// Comparing nothing proves nothing: a plan made while the ranges
		// were empty, resumed after rows arrived, must not pass.
		for _, q := range qs {
			var any bool
			if err := src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+q.from+` WHERE `+q.pred+`)`).Scan(&any); err != nil {
				return nil, fmt.Errorf("verify: check that %s has no row in the ranges on the source: %w", q.t, err)
			}
			if any {
				rep.Problem = fmt.Sprintf("compared no row, but %s has rows in the moving ranges on the source: verify again with a new run", q.t)
				break
			}
		}
	}
	return rep, nil
}

// afterChunk is run by the worker that compared a chunk, in its session,
// with every row that differs (not only the sampled ones of the report).
type afterChunk func(ctx context.Context, s *session, q *tableSQL, c chunk, diffs []Mismatch) error

// compareAll compares the chunks of todo, in snaps when given (a re-check's,
// closed by the caller), else in snapshots of its own; after, when given,
// runs on each chunk compared with every row that differs.
func compareAll(ctx context.Context, src, dst *pgxpool.Pool, opts Options, qs []*tableSQL, todo []chunk, rep *Report, snaps *snapshots, after afterChunk) error {
	n := min(opts.Parallel, len(todo))
	if snaps == nil {
		var err error
		if snaps, err = openSnapshots(ctx, src, dst, opts.Primary, opts.Holder, n); err != nil {
			return fmt.Errorf("verify: take snapshots: %w", err)
		}
		defer snaps.close()
	}
	n = min(n, len(snaps.sessions))
	rep.LSN = snaps.lsn
	opts.Logger.Info("verify snapshots taken", "lsn", snaps.lsn, "chunks", len(todo), "workers", n)

	free := make(chan *session, n)
	for _, s := range snaps.sessions[:n] {
		free <- s
	}
	var lim *rate.Limiter
	if opts.RowsPerSecond > 0 {
		lim = rate.NewLimiter(rate.Limit(opts.RowsPerSecond), max(int(opts.RowsPerSecond), opts.ChunkRows))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(n)
	// Last chunk first. The copy has just read the source in key order
	// (and written the target in it), so when verify starts the page cache
	// and shared_buffers hold the tables' last pages; a table larger than
	// them, read from its first chunk, evicts each page it will need
	// before it gets there and reads the whole table from disk again. A
	// 2.3 GB orders behind 2.6 GB of memory (a memory cgroup), read first
	// in key order as the copy does: the source's backend spent 4.5 s user
	// and 4.2-4.7 s system on the verify in key order, 4.4-4.7 s and
	// 2.1-2.2 s in reverse (issue #34).
	for i := len(todo) - 1; i >= 0; i-- {
		c := todo[i]
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			s := <-free
			defer func() { free <- s }()
			q := qs[c.table]
			cr, checksum, diffs, err := compareChunk(gctx, s, q, c, snaps.lsn, opts)
			if err != nil {
				return fmt.Errorf("verify chunk %d %s of %s: %w", c.index, interval(c.lo, c.hi), q.t, err)
			}
			rep.Tables[c.table].Chunks[c.index] = cr
			if after != nil {
				if err := after(gctx, s, q, c, diffs); err != nil {
					return err
				}
			}
			if opts.RunID != "" {
				if err := record(gctx, dst, opts.RunID, q, cr, checksum); err != nil {
					return err
				}
			}
			opts.Metrics.chunk(cr)
			for _, m := range cr.Keys {
				opts.Metrics.mismatch(m.Kind)
			}
			opts.Logger.Debug("verify chunk", "table", q.t.String(), "chunk", c.index, "rows", cr.Rows, "mismatches", cr.Mismatches, "lsn", snaps.lsn)
			if opts.Progress != nil {
				opts.Progress(cr)
			}
			if opts.Throttle != nil {
				_, err := opts.Throttle.Wait(gctx, int(max(cr.SourceRows, cr.TargetRows)), 0)
				return err
			}
			return throttle(gctx, lim, max(cr.SourceRows, cr.TargetRows))
		})
	}
	return g.Wait()
}

func throttle(ctx context.Context, lim *rate.Limiter, rows int64) error {
	if lim == nil {
		return nil
	}
	for rows > 0 {
		k := min(rows, int64(lim.Burst()))
		if err := lim.WaitN(ctx, int(k)); err != nil {
			return err
		}
		rows -= k
	}
	return nil
}

func resumed(q *tableSQL, c chunk) ChunkReport {
	cr := ChunkReport{Table: q.t.String(), Index: c.index, Lo: c.lo, Hi: c.hi, Resumed: true, LSN: c.done.lsn, VerifiedAt: c.done.verifiedAt,
		SourceRows: c.done.rows, TargetRows: c.done.rows, Rows: c.done.rows, Matches: c.done.rows}
	for i, r := range q.ranges {
		rr := RangeReport{Range: r}
		if i < len(c.done.rangeRows) {
			n := c.done.rangeRows[i]
			rr.SourceRows, rr.TargetRows, rr.Rows, rr.Matches = n, n, n, n
		}
		cr.Ranges = append(cr.Ranges, rr)
	}
	return cr
}

func summarize(t *TableReport, ranges []ring.Range) {
	t.Ranges = make([]RangeReport, len(ranges))
	for i, r := range ranges {
		t.Ranges[i].Range = r
	}
	t.Mismatches = 0
	for _, c := range t.Chunks {
		t.Mismatches += c.Mismatches
		for i, rr := range c.Ranges {
			if i >= len(t.Ranges) {
				break
			}
			t.Ranges[i].SourceRows += rr.SourceRows
			t.Ranges[i].TargetRows += rr.TargetRows
			t.Ranges[i].Rows += rr.Rows
			t.Ranges[i].Matches += rr.Matches
			t.Ranges[i].Mismatches += rr.Mismatches
		}
	}
}

// digest is the order-independent checksum of a set of rows. Each part is
// invertible (subtraction, XOR), so the digest of one half of an interval
// gives the other half's for free.
type digest struct {
	n int64
	x int64
	s big.Int
}

func (d *digest) add(o *digest) {
	d.n += o.n
	d.x ^= o.x
	d.s.Add(&d.s, &o.s)
}

func (d *digest) minus(o *digest) *digest {
	r := &digest{n: d.n - o.n, x: d.x ^ o.x}
	r.s.Sub(&d.s, &o.s)
	return r
}

func (d *digest) equal(o *digest) bool { return d.n == o.n && d.x == o.x && d.s.Cmp(&o.s) == 0 }

func (d *digest) String() string { return fmt.Sprintf("%d/%016x/%s", d.n, uint64(d.x), d.s.String()) }

// digests returns the digest of (lo, hi] per moving range.
func digests(ctx context.Context, tx pgx.Tx, q *tableSQL, lo, hi []string) ([]*digest, error) {
	out := make([]*digest, len(q.ranges))
	for i := range out {
		out[i] = &digest{}
	}
	// By the planner's index scan, not a bitmap scan: the bitmap scan cost
	// 25-35 % less CPU per row on an 855 MB table of section large's shape,
	// but in section large at 20 GB (jit off) the source's postgres spent
	// 103 CPU-s against 63 with the index scan, and the verify ran at 143
	// GiB/h against 223 (docs/benchmarks.md, issue #34).
	//
	// Where a chunk's CPU goes (2026-12-04, a 2.3 GB orders of section
	// large's shape, a fifth of 4 M rows moving, backend utime+stime,
	// warm sessions): the source 2.9 s, the target 1.5 s. jsonb's text
	// form is half of the target's (0.75 s without attrs) and a quarter of
	// the source's; the source's heap fetches of the rows that do not move
	// cost 1.3 s against 0.3 s for an index-only scan of the same keys.
	// Tried and slower or no better: fetching only the moving keys after an
	// index-only scan (= ANY of the keys: 3.8 s against 3.1 on the source;
	// a nested loop: 4.9 against 3.0), since nearly every heap page holds a
	// moving row; numeric_send or float8send instead of ::text (1.63 and
	// 1.54 s against 1.59 on the target); an XOR of per-column hashes
	// instead of hash_record_extended (about 5 %, within the noise).
	sql, args := q.sums(lo, hi)
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			r int
			d digest
			s string
		)
		if err := rows.Scan(&r, &d.n, &d.x, &s); err != nil {
			return nil, err
		}
		if _, ok := d.s.SetString(s, 10); !ok || r < 0 || r >= len(out) {
			return nil, fmt.Errorf("unexpected checksum row (%d, %q)", r, s)
		}
		out[r] = &d
	}
	return out, rows.Err()
}

func total(ds []*digest) *digest {
	t := &digest{}
	for _, d := range ds {
		t.add(d)
	}
	return t
}

// both runs f on the source and the target at once.
func both[T any](ctx context.Context, s *session, f func(ctx context.Context, tx pgx.Tx) (T, error)) (src, dst T, err error) {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		src, err = f(gctx, s.src.tx)
		if err != nil {
			err = fmt.Errorf("source: %w", err)
		}
		return err
	})
	g.Go(func() (err error) {
		dst, err = f(gctx, s.dst.tx)
		if err != nil {
			err = fmt.Errorf("target: %w", err)
		}
		return err
	})
	err = g.Wait()
	return src, dst, err
}

// compareChunk compares one chunk; it returns its report (with at most
// opts.MaxSampleKeys keys), its checksum and every row that differs.
func compareChunk(ctx context.Context, s *session, q *tableSQL, c chunk, lsn string, opts Options) (ChunkReport, string, []Mismatch, error) {
	start := time.Now()
	sd, dd, err := both(ctx, s, func(ctx context.Context, tx pgx.Tx) ([]*digest, error) { return digests(ctx, tx, q, c.lo, c.hi) })
	if err != nil {
		return ChunkReport{}, "", nil, err
	}
	cr := ChunkReport{Table: q.t.String(), Index: c.index, Lo: c.lo, Hi: c.hi, LSN: lsn, Ranges: make([]RangeReport, len(q.ranges))}
	equal := true
	for i, r := range q.ranges {
		cr.Ranges[i] = RangeReport{Range: r, SourceRows: sd[i].n, TargetRows: dd[i].n}
		equal = equal && sd[i].equal(dd[i])
	}
	var diffs []Mismatch
	if !equal {
		if diffs, err = bisect(ctx, s, q, c.lo, c.hi, total(sd), total(dd), opts.BisectRows); err != nil {
			return ChunkReport{}, "", nil, err
		}
	}
	extra := make([]int64, len(q.ranges))
	miss := make([]int64, len(q.ranges))
	for _, m := range diffs {
		i := max(q.rangeIndex(m.Token), 0) // the predicate keeps only moving tokens
		miss[i]++
		if m.Kind == Extra {
			extra[i]++
		}
	}
	for i := range cr.Ranges {
		rr := &cr.Ranges[i]
		rr.Rows = rr.SourceRows + extra[i]
		rr.Mismatches = miss[i]
		rr.Matches = rr.Rows - rr.Mismatches
		cr.SourceRows += rr.SourceRows
		cr.TargetRows += rr.TargetRows
		cr.Rows += rr.Rows
		cr.Matches += rr.Matches
		cr.Mismatches += rr.Mismatches
	}
	cr.Keys = diffs[:min(len(diffs), opts.MaxSampleKeys)]
	cr.VerifiedAt = time.Now()
	cr.Duration = time.Since(start)
	if sec := cr.Duration.Seconds(); sec > 0 {
		cr.RowsPerSecond = float64(cr.Rows) / sec
	}
	return cr, total(sd).String(), diffs, nil
}

// bisect narrows a mismatching key interval: it splits it at the median key
// of the side holding more rows, compares the left halves (the right half's
// digest follows by subtraction) and recurses into the halves that differ,
// down to intervals small enough to compare row by row.
func bisect(ctx context.Context, s *session, q *tableSQL, lo, hi []string, sd, dd *digest, small int) ([]Mismatch, error) {
	if max(sd.n, dd.n) <= int64(small) {
		return rowDiff(ctx, s, q, lo, hi)
	}
	side, n := s.src.tx, sd.n
	if dd.n > sd.n {
		side, n = s.dst.tx, dd.n
	}
	sql, args := q.nth(lo, hi, n/2)
	var mid []string
	if err := side.QueryRow(ctx, sql, args...).Scan(&mid); err != nil {
		return nil, fmt.Errorf("split %s: %w", interval(lo, hi), err)
	}
	ls, ld, err := both(ctx, s, func(ctx context.Context, tx pgx.Tx) (*digest, error) {
		ds, err := digests(ctx, tx, q, lo, mid)
		if err != nil {
			return nil, err
		}
		return total(ds), nil
	})
	if err != nil {
		return nil, err
	}
	var out []Mismatch
	if !ls.equal(ld) {
		m, err := bisect(ctx, s, q, lo, mid, ls, ld, small)
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	if rs, rd := sd.minus(ls), dd.minus(ld); !rs.equal(rd) {
		m, err := bisect(ctx, s, q, mid, hi, rs, rd, small)
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return out, nil
}

type hashedRow struct {
	key   []string
	token int64
	hash  int64
}

// rowDiff compares the rows of a small interval by primary key.
func rowDiff(ctx context.Context, s *session, q *tableSQL, lo, hi []string) ([]Mismatch, error) {
	sr, dr, err := both(ctx, s, func(ctx context.Context, tx pgx.Tx) ([]hashedRow, error) {
		sql, args := q.rows(lo, hi)
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (hashedRow, error) {
			var h hashedRow
			err := r.Scan(&h.key, &h.token, &h.hash)
			return h, err
		})
	})
	if err != nil {
		return nil, err
	}
	keyOf := func(k []string) string { return strings.Join(k, "\x00") }
	target := make(map[string]hashedRow, len(dr))
	for _, r := range dr {
		target[keyOf(r.key)] = r
	}
	var out []Mismatch
	mk := func(r hashedRow, k Kind) Mismatch {
		m := Mismatch{Key: r.key, Kind: k, Token: r.token}
		if i := q.rangeIndex(r.token); i >= 0 {
			m.Range = q.ranges[i]
		}
		return m
	}
	for _, r := range sr {
		k := keyOf(r.key)
		t, ok := target[k]
		switch {
		case !ok:
			out = append(out, mk(r, Missing))
		case t.hash != r.hash:
			out = append(out, mk(r, Different))
		}
		delete(target, k)
	}
	for _, r := range dr {
		if _, ok := target[keyOf(r.key)]; ok {
			out = append(out, mk(r, Extra))
		}
	}
	return out, nil
}

// agree checks that source and target have the same columns, by name and
// type, for every table (see Options.TargetSet).
func agree(o Options) error {
	if len(o.TargetSet.Tables) == 0 {
		return nil
	}
	name := func(role, n string) string {
		if n == "" {
			return "the " + role
		}
		return role + " " + n
	}
	for _, t := range o.Set.Tables {
		for _, d := range o.TargetSet.Tables {
			if d.String() != t.String() {
				continue
			}
			if e := tableset.Disagree(o.Set.Name, t, d, name("source", o.Source), name("target", o.Target), "verify"); e != nil {
				return e
			}
		}
	}
	return nil
}

// SchemaMoved: a comparison met a column dropped or retyped after verify
// read the shapes (SQLSTATE 42703, 42804); running it again reads them anew.
func SchemaMoved(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == pgerr.CodeUndefinedColumn || pe.Code == pgerr.CodeDatatypeMismatch)
}
