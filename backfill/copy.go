package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// DefaultChunkRows is the rows per chunk of Options{} (the migration's
// default, workflows.DefaultCopyChunkRows: cmd/reshard's TestKnobsAgree
// checks they agree).
const DefaultChunkRows = 5000

// Options configure one copy.
type Options struct {
	// Move identifies the move; it names the checkpoints, so a rerun with the
	// same Move resumes.
	Move string
	// Set is the table set, as introspected on the source.
	Set tableset.Set
	// TargetSet is the same tables as introspected on the target (empty:
	// the same shapes as Set). The copy writes the columns both sides have,
	// by name (tableset.Shared: a schema change on its way leaves one side
	// with a column the other lacks); a column the source has and the
	// target lacks makes Copy return a retryable *tableset.ColumnWaitError
	// without copying anything.
	TargetSet tableset.Set
	// Source and Target name the shards in messages.
	Source, Target string
	// Ranges are the moving ranges. They are normalized; each resulting range
	// of each table is a unit with its own checkpoint.
	Ranges []ring.Range
	// Split cuts every normalized range into this many equal token ranges, so
	// one range can be copied in parallel. Keep it constant across reruns of
	// a move: other sub-ranges do not find their checkpoints and start over
	// (harmlessly). Default 1.
	Split int
	// ChunkRows is the number of rows per chunk (0: DefaultChunkRows).
	ChunkRows int
	// RowsPerSec and BytesPerSec limit the copy (0 = unlimited); ignored when
	// Throttle is set.
	RowsPerSec, BytesPerSec float64
	// Throttle, when set, is used instead of RowsPerSec/BytesPerSec: keep it
	// to change the limits while the copy runs.
	Throttle *Throttle
	// Parallel is the number of units of one table copied at once (default
	// 1). The tables of the set are copied side by side, their chunks taking
	// turns, three per unit of Parallel: the next goes to the table furthest
	// behind its share of TableRows, so all of them end together and the
	// copy's rate stays what it was at its start (see turns). A unit takes a
	// source connection to read a chunk and a target one to write it.
	Parallel int
	// TableRows is each table's estimated rows in the moving ranges, by
	// tableset.Table.String() (the plan's estimate). Without it the tables
	// take turns by rows read.
	TableRows map[string]int64
	// Order forces a pagination order (default OrderAuto).
	Order Order
	// Pause, when set, pauses and resumes the copy.
	Pause *Pauser
	// Pressure, when set, is asked before every chunk and makes the copy back
	// off while the source is under load (see ActiveSessions).
	Pressure PressureFunc
	// Retries is how often a unit is restarted from its checkpoint after a
	// retryable error (lost connection, serialization failure, deadlock).
	// 0 means 3; negative means never.
	Retries int
	// StreamDuringCopy copies so that the move's stream can run beside the
	// copy (cdc.Options.CopyGate): every table pages by primary key (one
	// unit per table; integer and uuid keys only, cdc.NewKeyOrder), every
	// unit is registered before any chunk is read, and each chunk's end is
	// fixed by an index-only read of its keys and recorded on the target
	// before the chunk's snapshot is taken (cdc/copygate.go says why).
	StreamDuringCopy bool
	// Until, when set, ends a copy beside its stream between two chunks:
	// no chunk is read once it has passed, the chunks read are written,
	// and Copy returns ErrUntil with the copy not done. A copy ended by
	// its context instead may leave a chunk marked as being read and not
	// committed, and the stream holds the changes to that chunk's keys
	// until a later run commits it (a copy slice's end, a pause).
	Until time.Time
	// Stop, when closed, ends a copy between two chunks (a copy slice cut
	// by a pause or a rollback): no chunk is read after it, a chunk read
	// beside the stream is written first (no chunk is left for the stream
	// to hold), one read after the copy waits for its throttle is dropped,
	// and Copy returns ErrUntil; a wait for the throttle, a pause, source
	// pressure or a turn ends at once. Unlike a cancelled ctx, it never
	// cuts a chunk's commit, which the server may complete after Copy has
	// returned.
	Stop <-chan struct{}
	// Standby, when set, says that source is a streaming standby of the
	// source shard: each chunk is read only once it has replayed past the
	// slot's consistent point, and a chunk the standby cancels for a
	// recovery conflict is read again (see Standby).
	Standby *Standby
	// Progress, when set, is called after every committed chunk (from
	// several goroutines, one at a time).
	Progress func(Progress)
	Logger   *slog.Logger
	Metrics  *Metrics
}

// Progress reports one committed chunk.
type Progress struct {
	Table      string
	Range      ring.Range
	UnitRows   int64 // rows of this unit committed so far, all runs included
	UnitDone   bool
	Rows       int64 // rows this run committed, all units
	Bytes      int64
	UnitsDone  int
	UnitsTotal int
}

// Stats summarize a copy.
type Stats struct {
	Rows, Bytes, Chunks int64
	Units               int // table × range units
	Skipped             int // units already done by an earlier run
	Resumed             int // units that started from an earlier run's checkpoint
	Retries             int // units restarted after a retryable error
	RecoveryConflicts   int // chunk reads a standby cancelled and read again
	FastChunks          int64
	Throttled           time.Duration // waited for rows/s and bytes/s
	BackedOff           time.Duration // waited for source pressure
	Paused              time.Duration
	Elapsed             time.Duration
}

// CollisionError is pgerr's: a source row collides with a row the target
// owns (see there).
type CollisionError = pgerr.CollisionError

// unit is one table's rows of one or more ranges, copied in one pass with
// its own checkpoint, which rng names.
type unit struct {
	table tableset.Table
	rng   ring.Range   // the checkpoint's key: the span of parts
	parts []ring.Range // normalized; one for a unit paged by token
	order Order        // how a unit without a checkpoint pages
	lane  *lane        // its table's, shared by the table's units
}

type copier struct {
	src, dst *pgxpool.Pool
	opts     Options
	moving   []ring.Range
	throttle *Throttle
	log      *slog.Logger
	turns    *turns

	mu        sync.Mutex
	stats     Stats
	unitsDone int
	untilHit  bool // a unit stopped at Options.Until or Options.Stop
}

// ErrUntil: the copy stopped at Options.Until or Options.Stop, between chunks, not done.
var ErrUntil = errors.New("the copy stopped between chunks at its end time (Options.Until) or when told to (Options.Stop)")

// Copy copies the rows of opts.Ranges of every table of opts.Set from source
// to target (phase SNAPSHOT_COPY), resuming from the checkpoints of opts.Move.
// It returns when every unit is done, on the first error that retries do not
// cure, or when ctx ends; Stats counts what this run committed.
func Copy(ctx context.Context, source, target *pgxpool.Pool, opts Options) (Stats, error) {
	start := time.Now()
	if opts.Move == "" {
		return Stats{}, errors.New("backfill: Options.Move is empty: name the move, its checkpoints are kept under that name")
	}
	if len(opts.Set.Tables) == 0 {
		return Stats{}, errors.New("backfill: Options.Set has no tables")
	}
	if opts.ChunkRows <= 0 {
		opts.ChunkRows = DefaultChunkRows
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 1
	}
	if opts.Split <= 0 {
		opts.Split = 1
	}
	if opts.Retries == 0 {
		opts.Retries = 3
	}
	c := &copier{src: source, dst: target, opts: opts, moving: ring.Normalize(opts.Ranges), throttle: opts.Throttle, log: opts.Logger}
	if c.throttle == nil {
		c.throttle = NewThrottle(opts.RowsPerSec, opts.BytesPerSec)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("move", opts.Move)
	shared, err := sharedSet(opts)
	if err != nil {
		return Stats{}, err
	}
	c.opts.Set = shared
	if err := EnsureSchema(ctx, target); err != nil {
		return Stats{}, err
	}
	units, err := c.units(ctx)
	if err != nil {
		return Stats{}, err
	}
	if opts.StreamDuringCopy {
		if err := c.register(ctx, units); err != nil {
			return Stats{}, err
		}
	}
	c.stats.Units = len(units)
	c.turns = newTurns(opts.Parallel)
	tables := byTable(units)
	for _, table := range tables {
		c.turns.expect(table[0].lane)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, table := range tables {
		g.Go(func() error {
			defer c.turns.leave(table[0].lane)
			tg, tctx := errgroup.WithContext(gctx)
			tg.SetLimit(opts.Parallel)
			for _, u := range table {
				tg.Go(func() error { return c.runUnit(tctx, u) })
			}
			return tg.Wait()
		})
	}
	err = g.Wait()
	if schemaMoved(err) && c.shapesChanged(ctx, source, target, opts) {
		err = &SchemaMovedError{Err: err}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.untilHit {
		err = ErrUntil
	}
	c.stats.Elapsed = time.Since(start)
	return c.stats, err
}

// units cuts the copy into checkpointed units. A table that pages by token
// has a unit per (split) range: an index range scan of just its rows. A
// table that pages by primary key has one unit for all its ranges: one scan
// of the table keeps the rows of every range, where a unit per range would
// read the whole table once per range — with virtual nodes a move has many.
func (c *copier) units(ctx context.Context) ([]unit, error) {
	if len(c.moving) == 0 {
		return nil, nil
	}
	var out []unit
	for _, t := range c.opts.Set.Tables {
		order, err := c.chooseOrder(ctx, t)
		if err != nil {
			return nil, err
		}
		l := &lane{est: c.opts.TableRows[t.String()]}
		if order == OrderPK {
			parts := c.moving
			out = append(out, unit{table: t, rng: ring.Range{Lo: parts[0].Lo, Hi: parts[len(parts)-1].Hi}, parts: parts, order: OrderPK, lane: l})
			continue
		}
		for _, r := range c.moving {
			for _, sub := range splitRange(r, c.opts.Split) {
				out = append(out, unit{table: t, rng: sub, parts: []ring.Range{sub}, order: OrderToken, lane: l})
			}
		}
	}
	return out, nil
}

// byTable groups units by table, in the order units gave them.
func byTable(units []unit) [][]unit {
	var out [][]unit
	idx := map[*lane]int{}
	for _, u := range units {
		i, ok := idx[u.lane]
		if !ok {
			i = len(out)
			idx[u.lane] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], u)
	}
	return out
}

// splitRange cuts r into n ranges of (nearly) equal width.
func splitRange(r ring.Range, n int) []ring.Range {
	if n <= 1 {
		return []ring.Range{r}
	}
	width := uint64(r.Hi - r.Lo)
	step := width / uint64(n)
	if step == 0 {
		return []ring.Range{r}
	}
	out := make([]ring.Range, 0, n)
	lo := r.Lo
	for i := 0; i < n-1; i++ {
		hi := int64(uint64(lo) + step)
		out = append(out, ring.Range{Lo: lo, Hi: hi})
		lo = hi
	}
	return append(out, ring.Range{Lo: lo, Hi: r.Hi})
}

// runUnit copies one table's rows of one range, restarting from the
// checkpoint after retryable errors.
func (c *copier) runUnit(ctx context.Context, u unit) error {
	log := c.log.With("table", u.table.String(), "range", u.rng.String())
	for attempt := 0; ; attempt++ {
		err := c.copyUnit(ctx, u, log, attempt > 0)
		if err == nil || ctx.Err() != nil || attempt >= c.opts.Retries || !pgerr.Retryable(err) {
			return err
		}
		log.Warn("unit failed, resuming from its checkpoint", "attempt", attempt+1, "error", err)
		c.mu.Lock()
		c.stats.Retries++
		c.mu.Unlock()
		select {
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		case <-ctx.Done():
			return err
		}
	}
}

// chunk is what the reader hands the writer.
type chunk struct {
	chunkData
	from  position // position the chunk was read from: the checkpoint it extends
	pos   position // position after this chunk
	final bool     // no rows follow
}

func (c *copier) copyUnit(ctx context.Context, u unit, log *slog.Logger, retry bool) error {
	cp, err := loadCheckpoint(ctx, c.dst, c.opts.Move, u)
	if err != nil {
		return err
	}
	if !retry {
		c.turns.count(u.lane, cp.Rows)
	}
	if cp.Done {
		if !retry {
			c.mu.Lock()
			c.stats.Skipped++
			c.unitsDone++
			c.mu.Unlock()
		}
		return nil
	}
	order := Order(cp.Order)
	if c.opts.StreamDuringCopy && cp.Order != "" && order != OrderPK {
		return fmt.Errorf("copy %s of %s: an earlier run of move %s paged it by %s; a copy beside its stream pages by primary key: run it without StreamDuringCopy", u.rng, u.table, c.opts.Move, cp.Order)
	}
	if cp.Order == "" {
		order = u.order
	} else if !retry && (cp.LastPK != nil || !c.opts.StreamDuringCopy) { // a registered unit that copied nothing did not resume
		c.mu.Lock()
		c.stats.Resumed++
		c.mu.Unlock()
	}
	pos := position{}
	if cp.LastPK != nil {
		pos = position{token: cp.LastToken, pk: cp.LastPK}
	}
	log.Debug("copy unit", "order", order, "resume_rows", cp.Rows)

	w := &writer{c: c, u: u, order: order, fast: true, unitRows: cp.Rows}

	// Every chunk read holds a turn (see turns) until written or dropped.
	chunks := make(chan chunk, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(chunks)
		return c.read(gctx, u, order, pos, chunks)
	})
	g.Go(func() error {
		for ch := range chunks {
			err := w.write(gctx, ch)
			c.turns.give()
			if err != nil {
				return err
			}
		}
		return nil
	})
	err = g.Wait()
	for range chunks { // read, never written: the writer failed
		c.turns.give()
	}
	return err
}

// chooseOrder picks how table t pages the move's ranges.
func (c *copier) chooseOrder(ctx context.Context, t tableset.Table) (Order, error) {
	if c.opts.StreamDuringCopy {
		if c.opts.Order == OrderToken {
			return "", fmt.Errorf("copy %s: a copy beside its stream pages by primary key; Options.Order token is not allowed with StreamDuringCopy", t)
		}
		return OrderPK, nil
	}
	if c.opts.Order != OrderAuto {
		return c.opts.Order, nil
	}
	// Measured on 1M rows (cmd/reshard-bench): for 20 % of the token space
	// the primary-key scan copied 305k rows/s, the token-ordered index scan
	// 82k rows/s (random heap reads). The primary-key scan reads the whole
	// table once, whatever the ranges; token order reads only the moving
	// rows, ~4x slower each: it pays below about 1/16 of the space in all.
	//
	// Not an order: a TID range scan of runs of pages with the token
	// filter (#34). On section large's orders in key order it cost the
	// source what the primary-key scan does (5.7 s against 5.9 s of CPU for
	// 0.556 GiB moved), and a copy by block followed by the move's stream
	// diverged in 5 runs of 6 (none of 2 by primary key): a row that an
	// UPDATE moved to a page already read, and whose later key change left
	// its TOASTed value unchanged, reached the target with that value NULL.
	if ring.SpaceFraction(c.moving) > 1.0/16 {
		return OrderPK, nil
	}
	ok, err := tableset.HasTokenIndex(ctx, c.src, t)
	if err != nil {
		return "", fmt.Errorf("copy %s: look for the token index on the source: %w", t, err)
	}
	if ok {
		return OrderToken, nil
	}
	return OrderPK, nil
}

// pagingSettings make a chunk read walk the index its ORDER BY follows.
// The planner cannot estimate the token predicate (it guesses 0.5 % of the
// rows) and, for the first chunks of a unit, prefers a (parallel) scan of
// the whole rest of the table and a sort — once per chunk, which reads the
// table as many times as there are chunks. Keyset pagination must read each
// row once. Past the first chunk of a composite key it prefers a bitmap
// scan of the rest of the key and a sort just as well: each chunk then
// costs as much as the rows left (TestChunkReadWalksTheKey). SET LOCAL
// lasts for the statement's implicit transaction.
const pagingSettings = "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL max_parallel_workers_per_gather = 0; "

// read produces the unit's chunks, each read by one statement (its own short
// transaction) on the source, waiting for pause, pressure and throttle first.
func (c *copier) read(ctx context.Context, u unit, order Order, pos position, out chan<- chunk) error {
	nCols := len(u.table.WritableColumns())
	nExtra := len(u.table.PK)
	if order == OrderToken {
		nExtra++
	}
	var buf bytes.Buffer
	var rowBytes float64 // bytes per row of the last chunk
	// The waits between chunks end at Stop too (wctx); the reads and
	// writes of a chunk do not.
	wctx, stopWaits := c.untilStop(ctx)
	defer stopWaits()
	for {
		if c.stopAt() {
			// Between chunks: the writer commits what was read, and no
			// chunk is left marked as being read for the stream to hold.
			return nil
		}
		if err := c.waitClear(wctx); err != nil {
			if c.stopAt() {
				return nil
			}
			return err
		}
		n := c.throttle.ChunkRows(c.opts.ChunkRows, rowBytes)
		if n < c.opts.ChunkRows {
			// A second of the throttle is shared by the units reading side
			// by side (each table's, Parallel of each): each read waits for
			// its rows after reading them, and a chunk still waiting when a
			// copy slice ends is thrown away. A second's worth each made
			// three tables at 100 rows/s copy nothing in 2 s slices
			// (TestThrottledTablesKeepTheRateInShortSlices).
			n = max(1, n/(c.turns.copying()*c.opts.Parallel))
		}
		if err := c.turns.take(wctx, u.lane); err != nil {
			if c.stopAt() {
				return nil
			}
			return err
		}
		if c.opts.StreamDuringCopy {
			ch, err := c.readGated(ctx, u, pos, n, &buf, nCols, nExtra)
			if err == nil {
				c.turns.count(u.lane, int64(ch.rows))
				select {
				case out <- ch: // the writer gives the turn
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			if err != nil {
				c.turns.give()
				return err
			}
			// The throttle waits after the chunk went to the writer, not
			// while it is being read: the stream holds the changes of a
			// chunk in flight.
			d, err := c.throttle.Wait(wctx, ch.rows, len(ch.data))
			c.waited("rate", d)
			if err != nil {
				if c.stopAt() { // the chunk is the writer's
					return nil
				}
				return err
			}
			if ch.final {
				return nil
			}
			if ch.rows > 0 {
				rowBytes = float64(len(ch.data)) / float64(ch.rows)
			}
			pos = ch.pos
			continue
		}
		ch, err := c.readChunk(ctx, u, order, pos, n, &buf, nCols, nExtra)
		if err == nil {
			c.turns.count(u.lane, int64(ch.rows))
			var d time.Duration
			d, err = c.throttle.Wait(wctx, ch.rows, len(ch.data))
			c.waited("rate", d)
		}
		if err == nil {
			select {
			case out <- ch: // the writer gives the turn
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err != nil {
			c.turns.give()
			if c.stopAt() { // the chunk read is dropped: the next run reads it again
				return nil
			}
			return err
		}
		if ch.final {
			return nil
		}
		if ch.rows > 0 {
			rowBytes = float64(len(ch.data)) / float64(ch.rows)
		}
		pos = ch.pos
	}
}

// readChunk reads the unit's next chunk of at most n rows after pos, by
// one statement on the source, into buf.
func (c *copier) readChunk(ctx context.Context, u unit, order Order, pos position, n int, buf *bytes.Buffer, nCols, nExtra int) (chunk, error) {
	return c.readBy(ctx, chunkSQL(u.table, u.parts, order, pos, n), u, order, pos, n, buf, nCols, nExtra)
}

// readBy is readChunk by the chunk statement given.
func (c *copier) readBy(ctx context.Context, chunkStmt string, u unit, order Order, pos position, n int, buf *bytes.Buffer, nCols, nExtra int) (chunk, error) {
	buf.Reset()
	stmt := setOwnAppName + pagingSettings + chunkStmt
	if err := c.src.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
		sb := c.opts.Standby
		for conflicts := 0; ; conflicts++ {
			if sb != nil {
				if err := sb.awaitReplay(ctx, conn); err != nil {
					return err
				}
			}
			buf.Reset()
			_, err := conn.Conn().PgConn().CopyTo(ctx, buf, stmt)
			if sb == nil || !pgerr.RecoveryConflict(err) || conflicts >= sb.conflicts() {
				return err
			}
			// The standby cancelled the read to replay the primary's WAL
			// (hot_standby_feedback off, or max_standby_streaming_delay
			// short): the same chunk, read again, is as good.
			c.log.Debug("chunk read cancelled by a recovery conflict; reading it again", "table", u.table.String(), "error", err)
			c.mu.Lock()
			c.stats.RecoveryConflicts++
			c.mu.Unlock()
		}
	}); err != nil {
		return chunk{}, fmt.Errorf("copy chunk %s of %s: read from source: %w", u.rng, u.table, err)
	}
	// splitChunk writes the rows into a slice of its own: buf is read
	// from again at the next chunk while the writer may still hold this one.
	data, err := splitChunk(buf.Bytes(), nCols, nExtra)
	if err != nil {
		return chunk{}, fmt.Errorf("copy chunk %s of %s: %w", u.rng, u.table, err)
	}
	ch := chunk{chunkData: data, from: pos, pos: pos, final: data.rows < n}
	if data.rows == 0 {
		return ch, nil
	}
	ch.pos = position{pk: make([]string, len(u.table.PK))}
	e := data.extras
	if order == OrderToken {
		if len(e[0]) != 8 {
			return chunk{}, fmt.Errorf("copy chunk %s of %s: token of %d bytes", u.rng, u.table, len(e[0]))
		}
		ch.pos.token = int64(uint64(e[0][0])<<56 | uint64(e[0][1])<<48 | uint64(e[0][2])<<40 | uint64(e[0][3])<<32 |
			uint64(e[0][4])<<24 | uint64(e[0][5])<<16 | uint64(e[0][6])<<8 | uint64(e[0][7]))
		e = e[1:]
	}
	for i, v := range e {
		ch.pos.pk[i] = string(v)
	}
	ch.extras = nil // they point into buf
	return ch, nil
}

// stopAt reports (and records) that the copy is to end between chunks:
// Options.Stop is closed, or Options.Until of a copy beside its stream has
// passed.
func (c *copier) stopAt() bool {
	stop := c.opts.StreamDuringCopy && !c.opts.Until.IsZero() && !time.Now().Before(c.opts.Until)
	if !stop && c.opts.Stop != nil {
		select {
		case <-c.opts.Stop:
			stop = true
		default:
		}
	}
	if stop {
		c.mu.Lock()
		c.untilHit = true
		c.mu.Unlock()
	}
	return stop
}

// untilStop is ctx, also ended by Options.Stop; release ends its watcher.
func (c *copier) untilStop(ctx context.Context) (_ context.Context, release func()) {
	if c.opts.Stop == nil {
		return ctx, func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-c.opts.Stop:
			cancel()
		case <-wctx.Done():
		}
	}()
	return wctx, func() { cancel(); <-done }
}

// waitClear waits while the copy is paused or the source under pressure.
func (c *copier) waitClear(ctx context.Context) error {
	for {
		d, err := c.opts.Pause.wait(ctx)
		c.waited("pause", d)
		if err != nil {
			return err
		}
		if c.opts.Pressure == nil {
			return nil
		}
		back, err := c.opts.Pressure(ctx)
		if err != nil {
			return fmt.Errorf("backfill: ask for source pressure: %w", err)
		}
		if back <= 0 {
			return nil
		}
		t := time.NewTimer(back)
		select {
		case <-t.C:
			c.waited("pressure", back)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

func (c *copier) waited(reason string, d time.Duration) {
	if d <= time.Millisecond {
		return
	}
	c.opts.Metrics.waited(c.opts.Move, reason, d)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch reason {
	case "rate":
		c.stats.Throttled += d
	case "pressure":
		c.stats.BackedOff += d
	case "pause":
		c.stats.Paused += d
	}
}

// writer writes a unit's chunks, each on a target connection of its own
// from the pool: a unit waiting for its turn holds none, so the units of
// every table can wait side by side on a pool smaller than their number.
type writer struct {
	c        *copier
	u        unit
	order    Order
	fast     bool // COPY straight into the table until a conflict says otherwise
	unitRows int64
}

// write commits one chunk and its checkpoint in one target transaction.
func (w *writer) write(ctx context.Context, ch chunk) error {
	fast := w.fast && ch.rows > 0
	err := w.tx(ctx, ch, fast)
	var pgErr *pgconn.PgError
	if fast && errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeUniqueViolation {
		// A row of the chunk exists on the target (an earlier copy, the
		// applier, or a collision): upsert from now on, which tells them apart.
		w.fast = false
		err = w.tx(ctx, ch, false)
	}
	if err != nil {
		return err
	}
	w.unitRows += int64(ch.rows)
	c := w.c
	c.opts.Metrics.chunk(c.opts.Move, w.u.table.String(), ch.rows, len(ch.data))
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch.rows > 0 {
		c.stats.Chunks++
	}
	if fast && w.fast {
		c.stats.FastChunks++
	}
	c.stats.Rows += int64(ch.rows)
	c.stats.Bytes += int64(len(ch.data))
	if ch.final {
		c.unitsDone++
	}
	if c.opts.Progress != nil {
		c.opts.Progress(Progress{Table: w.u.table.String(), Range: w.u.rng, UnitRows: w.unitRows, UnitDone: ch.final,
			Rows: c.stats.Rows, Bytes: c.stats.Bytes, UnitsDone: c.unitsDone, UnitsTotal: c.stats.Units})
	}
	return nil
}

func (w *writer) tx(ctx context.Context, ch chunk, fast bool) error {
	t := w.u.table
	fail := func(what string, err error) error {
		return fmt.Errorf("copy chunk %s of %s: %s: %w", w.u.rng, t, what, pgerr.Unique(err))
	}
	conn, err := w.c.dst.Acquire(ctx)
	if err != nil {
		return fail("connect to target", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail("begin on target", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// The applier role: fence triggers (and any other trigger) do not fire.
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		return fail("set session_replication_role", err)
	}
	if ch.rows > 0 {
		pg := tx.Conn().PgConn()
		if fast {
			if _, err := pg.CopyFrom(ctx, bytes.NewReader(ch.data), copyInSQL(t.Quoted(), t)); err != nil {
				return fail("copy into target", err)
			}
		} else {
			// The session's staging table, made by its first chunk to need it.
			if _, err := tx.Exec(ctx, stageSQL(t)); err != nil {
				return fail("create staging table", err)
			}
			if _, err := pg.CopyFrom(ctx, bytes.NewReader(ch.data), copyInSQL(stageName(t), t)); err != nil {
				return fail("copy into staging table", err)
			}
			tag, err := tx.Exec(ctx, upsertSQL(t, w.c.moving))
			if err != nil {
				return fail("upsert", err)
			}
			if tag.RowsAffected() < int64(ch.rows) {
				return w.collision(ctx, tx, tag.RowsAffected(), ch.rows)
			}
		}
	}
	if err := saveCheckpoint(ctx, tx, w.c.opts.Move, w.u, w.order, ch.from, ch.pos, ch.rows, ch.final); err != nil {
		return fail("save checkpoint", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail("commit", err)
	}
	return nil
}

// collision finds the target row that kept the upsert from writing every row.
func (w *writer) collision(ctx context.Context, tx pgx.Tx, wrote int64, rows int) error {
	t := w.u.table
	var (
		key      []string
		shardKey string
	)
	err := tx.QueryRow(ctx, collisionSQL(t, w.c.moving)).Scan(&key, &shardKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("copy chunk %s of %s: the upsert wrote %d of %d rows but no colliding row was found", w.u.rng, t, wrote, rows)
	}
	if err != nil {
		return fmt.Errorf("copy chunk %s of %s: find the colliding row: %w", w.u.rng, t, err)
	}
	parts := make([]string, len(t.PK))
	for i, c := range t.PK {
		parts[i] = c + "=" + key[i]
	}
	return &CollisionError{Table: t.String(), Key: strings.Join(parts, ", "), TargetShardKey: shardKey}
}

// sharedSet is opts.Set with, per table, the columns the target has too
// (tableset.Shared), or a *tableset.ColumnWaitError naming a column the
// target lacks.
func sharedSet(opts Options) (tableset.Set, error) {
	if len(opts.TargetSet.Tables) == 0 {
		return opts.Set, nil
	}
	out := opts.Set
	out.Tables = make([]tableset.Table, len(opts.Set.Tables))
	for i, t := range opts.Set.Tables {
		var dst *tableset.Table
		for j := range opts.TargetSet.Tables {
			if opts.TargetSet.Tables[j].String() == t.String() {
				dst = &opts.TargetSet.Tables[j]
			}
		}
		if dst == nil {
			return tableset.Set{}, fmt.Errorf("backfill: table %s is not in the target's table set", t)
		}
		if lacking := tableset.OnlyIn(t, *dst); len(lacking) > 0 {
			return tableset.Set{}, &tableset.ColumnWaitError{Keyspace: opts.Set.Name, Table: t, Has: shardName("source", opts.Source),
				Lacking: shardName("target", opts.Target), Columns: lacking, Why: "the copy"}
		}
		out.Tables[i] = tableset.Shared(t, *dst)
	}
	return out, nil
}

func shardName(role, name string) string {
	if name == "" {
		return "the " + role
	}
	return role + " " + name
}

// SchemaMovedError: a chunk met a schema change made after the copy read
// the tables' shapes (a column dropped: 42703; a type changed, so the binary
// COPY stream no longer fits: 22P03, 42804), and the shapes did change.
// Retryable: the next run reads them again.
type SchemaMovedError struct{ Err error }

func (e *SchemaMovedError) Error() string {
	return fmt.Sprintf("%v: the tables' columns changed while the copy ran; it reads them again and continues from its checkpoints", e.Err)
}
func (e *SchemaMovedError) Unwrap() error { return e.Err }

// Retryable: the next attempt reads the table as it now is.
func (e *SchemaMovedError) Retryable() bool { return true }

// shapesChanged reports whether either side's tables differ now from the
// shapes the copy started with (an error reading them: no).
func (c *copier) shapesChanged(ctx context.Context, source, target *pgxpool.Pool, opts Options) bool {
	spec := tableset.Spec{Name: opts.Set.Name}
	for _, t := range opts.Set.Tables {
		spec.Tables = append(spec.Tables, tableset.TableSpec{Schema: t.Schema, Table: t.Name, KeyColumn: t.KeyColumn})
	}
	ctx = context.WithoutCancel(ctx)
	for _, side := range []struct {
		pool *pgxpool.Pool
		was  tableset.Set
	}{{source, opts.Set}, {target, opts.TargetSet}} {
		if len(side.was.Tables) == 0 {
			continue
		}
		now, err := tableset.Introspect(ctx, side.pool, spec, "shard")
		if err != nil {
			return false
		}
		for i := range now.Tables {
			if !slices.Equal(now.Tables[i].Columns, side.was.Tables[i].Columns) {
				return true
			}
		}
	}
	return false
}

// schemaMoved: the SQLSTATEs of a chunk that met a schema change.
func schemaMoved(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == pgerr.CodeUndefinedColumn || pe.Code == pgerr.CodeInvalidBinaryRepr || pe.Code == pgerr.CodeDatatypeMismatch)
}
