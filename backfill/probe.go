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
	// Then, when set, runs in the probe's target transaction once the copy
	// has stopped, over the table the rows were written into (a table like
	// t, of the same columns, in schema reshard), before the rollback:
	// capacity times the applier's statements on those rows there.
	Then func(ctx context.Context, tx pgx.Tx, into tableset.Table) error
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
// ALL: its indexes, defaults, storage) in one target transaction that is
// rolled back. The target writes the rows' WAL and index entries as the
// copy does, but commits once, not per chunk. No checkpoint is read or
// written; nothing is left on either side.
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
	intoT := t
	intoT.Schema, intoT.Name = "reshard", "capacity_probe_"+strconv.Itoa(os.Getpid())
	into := intoT.Quoted()
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica; CREATE SCHEMA IF NOT EXISTS reshard; "+
		fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)", into, t.Quoted())); err != nil {
		return st, fmt.Errorf("probe the copy of %s: make a table like it on the target (in a transaction rolled back): %w", t, err)
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
			if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(ch.data), copyInSQL(into, t)); err != nil {
				stopReading()
				return st, fmt.Errorf("probe the copy of %s: write a chunk on the target: %w", t, err)
			}
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
		if err := o.Then(ctx, tx, intoT); err != nil {
			return st, fmt.Errorf("probe on the rows copied of %s: %w", t, err)
		}
	}
	return st, nil
}
