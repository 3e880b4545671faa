package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
}

// Probe times the copy's own work on t without keeping any of it: the
// chunks Copy would read first (its order, chunk statement, chunk size and
// paging settings, over ranges), each read while the one before is written,
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
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	chunks := make(chan chunk, 1)
	read := make(chan error, 1)
	go func() {
		defer close(chunks)
		var buf bytes.Buffer
		for _, u := range units {
			pos := position{}
			for {
				ch, err := c.readChunk(rctx, u, order, pos, o.ChunkRows, &buf, nCols, nExtra)
				if err != nil {
					read <- err
					return
				}
				select {
				case chunks <- ch:
				case <-rctx.Done():
					read <- nil
					return
				}
				if ch.final {
					break
				}
				pos = ch.pos
			}
		}
		read <- nil
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
