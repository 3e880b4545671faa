package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/spread"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// ProbeOptions bound a probe of the copy (Probe): capacity's sample.
type ProbeOptions struct {
	Ranges    []ring.Range
	ChunkRows int   // 0: DefaultChunkRows
	Order     Order // as Options.Order
	// The probe stops after the first chunk that takes it past both
	// MinBytes and MinTime, or past MaxTime, or when the rows run out.
	MinBytes         int64
	MinTime, MaxTime time.Duration
	// Hold is how many target transactions the chunks are written into,
	// in turn, each into a table of its own in a schema of its own (0: 1):
	// capacity's probe of the verify reads each as one of the verify's
	// workers, and a transaction's uncommitted rows are visible to it
	// alone. The chunks are still written one at a time, as the copy does.
	Hold int
	// Then, when set and rows were copied, runs once the copy has stopped
	// and before the rollback, with every target transaction and the table
	// its rows were written into (a table like t, of the same columns):
	// capacity times the verify's reads and the applier's statements on
	// those rows there. Its error is Probe's.
	Then func(ctx context.Context, held []Held) error
}

// Held is one of the probe's target transactions, the table its rows were
// written into and how many (Probe's ProbeOptions.Then).
type Held struct {
	Tx   pgx.Tx
	Into tableset.Table
	Rows int64
}

// ProbeStats is what a probe copied.
type ProbeStats struct {
	Order   Order
	Rows    int64
	Bytes   int64 // of the binary COPY stream
	Chunks  int64
	Elapsed time.Duration
	// AllRows: the moving rows ran out before the probe's bounds.
	AllRows bool
	// Segments is how many parts of the key space the probe read a chunk
	// of in turn (probeSegments): 1, or a unit each, when it read from
	// the first key on.
	Segments int
}

// probeParts is how many parts of a large table's key space the copy's
// probe reads a chunk of in turn, and probeSampleRows how many sampled keys
// a part's bound is chosen among, from at least probeSamplePages pages.
const (
	probeParts       = 16
	probeSampleRows  = 32
	probeSamplePages = 16 * probeParts
)

// probeSegment is a part of the key space the copy's probe reads: the rows
// after pos, up to end (nil: the unit's end).
type probeSegment struct {
	u    unit
	pos  position
	end  []string
	done bool
}

// probeRead reads the segments' chunks into out until they are done or
// ctx ends (no error then): a segment to its end, then the next, or with
// spread a chunk of each in turn.
func (c *copier) probeRead(ctx context.Context, segs []probeSegment, spread bool, order Order, n, nCols, nExtra int, out chan<- chunk) error {
	var buf bytes.Buffer
	for i := 0; ; {
		s := nextSegment(segs, i)
		if s < 0 {
			return nil
		}
		sg := &segs[s]
		stmt := chunkSQL(sg.u.table, sg.u.parts, order, sg.pos, n)
		if sg.end != nil {
			stmt = probeChunkSQL(sg.u.table, sg.u.parts, sg.pos, sg.end, n)
		}
		ch, err := c.readBy(ctx, stmt, sg.u, order, sg.pos, n, &buf, nCols, nExtra)
		if err != nil {
			return err
		}
		select {
		case out <- ch:
		case <-ctx.Done():
			return nil
		}
		sg.pos, sg.done = ch.pos, ch.final
		i = s
		if spread {
			i = (s + 1) % len(segs)
		}
	}
}

// nextSegment is the first segment from i on (wrapping) not done, or -1.
func nextSegment(segs []probeSegment, i int) int {
	for k := range segs {
		if j := (i + k) % len(segs); !segs[j].done {
			return j
		}
	}
	return -1
}

// probeSegments cuts what the probe reads. A table paged by primary key
// whose moving rows fill at least 4 chunks a part is cut into probeParts
// parts of its key space at keys of a page sample, taken in spread.Order
// and read a chunk each in turn (spread true), so that a probe of a few
// chunks meets the table's parts in proportion, its pages cached or not:
// the copy reads the whole table, and at 20 GB a probe of the first chunks
// alone, the pages loaded first, ran at 17.8 to 28.4 MiB/s across runs
// whose copies ran at 23.2 to 27.2. Otherwise each unit is read from its
// first key on, one after the other.
func (c *copier) probeSegments(ctx context.Context, t tableset.Table, units []unit, chunkRows int) ([]probeSegment, bool, error) {
	whole := make([]probeSegment, len(units))
	for i, u := range units {
		whole[i] = probeSegment{u: u}
	}
	if len(units) != 1 || units[0].order != OrderPK {
		return whole, false, nil
	}
	var est, pages float64
	if err := c.src.QueryRow(ctx, `SELECT reltuples, relpages FROM pg_class WHERE oid = $1::regclass`, t.Quoted()).Scan(&est, &pages); err != nil {
		return nil, false, fmt.Errorf("probe the copy of %s: estimate its rows: %w", t, err)
	}
	if est*ring.SpaceFraction(c.moving) < 4*probeParts*float64(chunkRows) {
		return whole, false, nil
	}
	keys := make([]string, len(t.PK))
	for i, col := range t.PK {
		keys[i] = pgx.Identifier{col}.Sanitize() + "::text"
	}
	// A page sample's rows come in clusters of a page: at least
	// probeSamplePages pages, so that its quantiles are not a few pages'.
	pct := min(100, max(100*probeParts*probeSampleRows/est, 100*probeSamplePages/max(pages, 1), 0.0001))
	rows, err := c.src.Query(ctx, "SELECT ARRAY["+strings.Join(keys, ", ")+"]::text[] FROM "+t.Quoted()+
		" TABLESAMPLE SYSTEM ("+strconv.FormatFloat(pct, 'f', 6, 64)+") ORDER BY "+columnList("", t.PK))
	if err != nil {
		return nil, false, fmt.Errorf("probe the copy of %s: sample its keys: %w", t, err)
	}
	sample, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return nil, false, fmt.Errorf("probe the copy of %s: sample its keys: %w", t, err)
	}
	if len(sample) < 4*probeParts {
		return whole, false, nil
	}
	bounds := make([][]string, probeParts+1) // bounds[0] and bounds[probeParts]: open
	for i := 1; i < probeParts; i++ {
		bounds[i] = sample[i*len(sample)/probeParts]
	}
	segs := make([]probeSegment, 0, probeParts)
	for _, i := range spread.Order(probeParts) {
		segs = append(segs, probeSegment{u: units[0], pos: position{pk: bounds[i]}, end: bounds[i+1]})
	}
	return segs, true, nil
}

// Probe times the copy's own work on t without keeping any of it: chunks
// as Copy reads them (its order, chunk statement, chunk size and paging
// settings, over ranges), from parts spread over a large table's key
// space (probeSegments) or else from the first key on, each read while
// the one before is written,
// and written as Copy's fast path writes them (binary COPY, with
// session_replication_role = replica) into a table made like t (INCLUDING
// ALL: its indexes, defaults, storage) in a target transaction that is
// rolled back (o.Hold of them, the chunks in turn, each its own table).
// The target writes the rows' WAL and index entries as the copy does, but
// commits once, not per chunk. No checkpoint is read or written; nothing
// is left on either side.
func Probe(ctx context.Context, source, target *pgxpool.Pool, t tableset.Table, o ProbeOptions) (ProbeStats, error) {
	if o.ChunkRows <= 0 {
		o.ChunkRows = DefaultChunkRows
	}
	c := &copier{src: source, dst: target, opts: Options{Ranges: o.Ranges, Order: o.Order, ChunkRows: o.ChunkRows},
		moving: ring.Normalize(o.Ranges), log: slog.New(slog.DiscardHandler)}
	var st ProbeStats
	if len(c.moving) == 0 {
		return st, errors.New("backfill: probe: no range")
	}
	order, err := c.chooseOrder(ctx, t)
	if err != nil {
		return st, err
	}
	st.Order = order
	units := []unit{{table: t, rng: c.moving[0], parts: c.moving, order: order}}
	if order == OrderToken {
		units = units[:0]
		for _, r := range c.moving {
			units = append(units, unit{table: t, rng: r, parts: []ring.Range{r}, order: order})
		}
	}

	n := max(o.Hold, 1)
	held := make([]Held, n)
	for i := range held {
		conn, err := target.Acquire(ctx)
		if err != nil {
			return st, fmt.Errorf("probe the copy of %s: connect to the target: %w", t, err)
		}
		defer conn.Release()
		tx, err := conn.Begin(ctx)
		if err != nil {
			return st, fmt.Errorf("probe the copy of %s: %w", t, err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		// A schema per transaction: two open transactions creating the same
		// schema would wait for each other.
		into := t
		into.Schema, into.Name = "reshard_probe_"+strconv.Itoa(os.Getpid())+"_"+strconv.Itoa(i), "capacity_probe"
		held[i] = Held{Tx: tx, Into: into}
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica; "+setOwnAppName+
			fmt.Sprintf("CREATE SCHEMA %s; CREATE TABLE %s (LIKE %s INCLUDING ALL)", pgx.Identifier{into.Schema}.Sanitize(), into.Quoted(), t.Quoted())); err != nil {
			return st, fmt.Errorf("probe the copy of %s: make a table like it on the target (in a transaction rolled back): %w", t, err)
		}
	}

	nCols, nExtra := len(t.WritableColumns()), len(t.PK)
	if order == OrderToken {
		nExtra++
	}
	segs, spread, err := c.probeSegments(ctx, t, units, o.ChunkRows)
	if err != nil {
		return st, err
	}
	st.Segments = len(segs)
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	chunks := make(chan chunk, 1)
	read := make(chan error, 1)
	go func() {
		defer close(chunks)
		read <- c.probeRead(rctx, segs, spread, order, o.ChunkRows, nCols, nExtra, chunks)
	}()
	start := time.Now()
	st.AllRows = true
	stopped := false
	for ch := range chunks {
		if ch.rows > 0 {
			h := &held[st.Chunks%int64(n)]
			if _, err := h.Tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(ch.data), copyInSQL(h.Into.Quoted(), t)); err != nil {
				stopReading()
				return st, fmt.Errorf("probe the copy of %s: write a chunk on the target: %w", t, err)
			}
			h.Rows += int64(ch.rows)
		}
		st.Rows += int64(ch.rows)
		st.Bytes += int64(len(ch.data))
		st.Chunks++
		st.Elapsed = time.Since(start)
		if st.Elapsed >= o.MaxTime && o.MaxTime > 0 || st.Bytes >= o.MinBytes && st.Elapsed >= o.MinTime {
			st.AllRows, stopped = false, true
			stopReading()
			for range chunks {
			}
			break
		}
	}
	if err := <-read; err != nil && (!stopped || ctx.Err() != nil) {
		return st, fmt.Errorf("probe the copy of %s: %w", t, err)
	}
	if o.Then != nil && st.Rows > 0 {
		if err := o.Then(ctx, held); err != nil {
			return st, fmt.Errorf("probe on the rows copied of %s: %w", t, err)
		}
	}
	return st, nil
}
