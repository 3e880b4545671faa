package cdc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// ApplyProbeOptions size a probe of the applier (ProbeApply).
type ApplyProbeOptions struct {
	Ranges []ring.Range
	// Rows bounds the rows of the table the probe changes (default
	// DefaultApplyProbeRows).
	Rows int
	// Inserts, Updates and Deletes weigh the kinds of change applied, as
	// the source makes them (pg_stat_user_tables' n_tup_ins, n_tup_upd,
	// n_tup_del); all zero: updates only.
	Inserts, Updates, Deletes float64
	// FlushRows and StageMinRows as the stream's Options (default
	// DefaultFlushRows and DefaultStageMinRows).
	FlushRows, StageMinRows int
}

// DefaultApplyProbeRows is ApplyProbeOptions.Rows' default: a catch-up's
// batch (Options.BatchRows' default), which the stream applies in
// 50-180k changes/s on 2 cores (docs/benchmarks.md, section cdc), a
// fraction of a second.
const DefaultApplyProbeRows = 10000

// ApplyProbeStats is what a probe of the applier applied.
type ApplyProbeStats struct {
	Inserts, Updates, Deletes int64
	Flushes                   int64
	// Staged: the flushes took the staged path (binary COPY into a stage,
	// then one statement per kind), as a catch-up's full batches do.
	Staged  bool
	Elapsed time.Duration
}

// Changes is the row changes the probe applied.
func (s ApplyProbeStats) Changes() int64 { return s.Inserts + s.Updates + s.Deletes }

// ProbeApply times the applier's own work on rows t already holds, in tx,
// a transaction on the target that the caller rolls back (capacity's
// probe runs it over the rows its copy probe wrote there): up to o.Rows
// of t's rows in o.Ranges are read back as text, the form pgoutput sends, and applied
// as one catch-up batch of the stream applies source changes: a share of
// them deleted, a share updated in place, and the rest inserted again
// after a delete of their keys made before the clock starts, in the
// proportions of o. The batch goes through the stream's own target:
// pending operations flushed every FlushRows, by the staged path (stage.go)
// from StageMinRows, or the text[] statements (apply.go), with the
// moving-range predicate of o.Ranges. Not timed: the read back, the
// walsender's decoding on the source, and the batch's COMMIT (the caller
// rolls back). tx must run with session_replication_role = replica, as the
// applier does, when t has fence triggers.
func ProbeApply(ctx context.Context, tx pgx.Tx, t tableset.Table, o ApplyProbeOptions) (ApplyProbeStats, error) {
	var st ApplyProbeStats
	if o.Rows <= 0 {
		o.Rows = DefaultApplyProbeRows
	}
	if o.FlushRows <= 0 {
		o.FlushRows = DefaultFlushRows
	}
	if o.StageMinRows <= 0 {
		o.StageMinRows = DefaultStageMinRows
	}
	if o.Inserts < 0 || o.Updates < 0 || o.Deletes < 0 {
		return st, fmt.Errorf("probe the applier on %s: a negative share of changes (inserts %g, updates %g, deletes %g)", t, o.Inserts, o.Updates, o.Deletes)
	}
	if o.Inserts+o.Updates+o.Deletes == 0 {
		o.Updates = 1
	}
	if len(o.Ranges) == 0 {
		return st, errors.New("probe the applier: no range")
	}
	p, err := newTablePlan(t, o.Ranges, 0)
	if err != nil {
		return st, fmt.Errorf("probe the applier: %w", err)
	}
	rows, err := readBack(ctx, tx, p, o.Rows)
	if err != nil {
		return st, err
	}
	if len(rows) == 0 {
		return st, nil
	}
	m := NewMetrics(nil)
	tg := &target{conn: tx.Conn(), tx: tx, plans: []*tablePlan{p}, pending: map[*tablePlan]*pendingTable{}, stageMin: o.StageMinRows,
		staged: map[*tablePlan]int{}, mFlushes: [2]prometheus.Counter{m.flushes.WithLabelValues("probe", "array"), m.flushes.WithLabelValues("probe", "staged")}}
	defer func() {
		if tg.inflight != nil {
			_ = tg.inflight.pl.Close()
		}
	}()
	total := o.Inserts + o.Updates + o.Deletes
	n := len(rows)
	nIns := int(math.Round(float64(n) * o.Inserts / total))
	nDel := min(int(math.Round(float64(n)*o.Deletes/total)), n-nIns)
	ins, del, upd := rows[:nIns], rows[nIns:nIns+nDel], rows[nIns+nDel:]
	// The inserted keys leave first, untimed: the batch then inserts rows
	// that are not there, as a source INSERT's are not.
	for _, r := range ins {
		tg.add(p, &pendingOp{pk: r.pk})
	}
	if err := tg.sync(ctx); err != nil {
		return st, fmt.Errorf("probe the applier on %s: delete the keys it inserts again: %w", t, err)
	}
	flushes := func() int64 { return int64(counterValue(tg.mFlushes[0]) + counterValue(tg.mFlushes[1])) }
	staged0, f0 := counterValue(tg.mFlushes[1]), flushes()
	start := time.Now()
	add := func(op *pendingOp) error {
		tg.add(p, op)
		if tg.npend >= o.FlushRows {
			return tg.flush(ctx)
		}
		return nil
	}
	for _, r := range del {
		if err := add(&pendingOp{pk: r.pk}); err != nil {
			return st, fmt.Errorf("probe the applier on %s: %w", t, err)
		}
	}
	for _, r := range upd {
		if err := add(&pendingOp{pk: r.pk, row: r.row, upsert: true, update: true}); err != nil {
			return st, fmt.Errorf("probe the applier on %s: %w", t, err)
		}
	}
	for _, r := range ins {
		if err := add(&pendingOp{pk: r.pk, row: r.row, upsert: true}); err != nil {
			return st, fmt.Errorf("probe the applier on %s: %w", t, err)
		}
	}
	if err := tg.sync(ctx); err != nil {
		return st, fmt.Errorf("probe the applier on %s: %w", t, err)
	}
	st.Elapsed = time.Since(start)
	st.Inserts, st.Updates, st.Deletes = int64(len(ins)), int64(len(upd)), int64(len(del))
	st.Flushes = flushes() - f0
	st.Staged = counterValue(tg.mFlushes[1]) > staged0
	return st, nil
}

// probeRow is a row read back for ProbeApply: its columns as pgoutput
// would send them, and its primary key.
type probeRow struct {
	row []Col
	pk  []string
}

// readBack reads up to n of p's rows in the moving ranges in text, the
// plan's columns in its order, each value as the walsender formats it.
func readBack(ctx context.Context, tx pgx.Tx, p *tablePlan, n int) ([]probeRow, error) {
	sel := make([]string, len(p.cols))
	for i, c := range p.cols {
		sel[i] = "t." + pgx.Identifier{c.Name}.Sanitize() + "::text"
	}
	rows, err := tx.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FROM "+p.t.Quoted()+" AS t WHERE "+p.pred+" LIMIT $1", n)
	if err != nil {
		return nil, fmt.Errorf("probe the applier: read rows of %s back: %w", p.t, err)
	}
	defer rows.Close()
	var out []probeRow
	for rows.Next() {
		raw := rows.RawValues()
		row := make([]Col, len(raw))
		for i, v := range raw {
			if v == nil {
				row[i] = Col{Kind: ColNull}
				continue
			}
			row[i] = Col{Kind: ColText, Data: append([]byte(nil), v...)}
		}
		pk, ok := p.pkOf(row)
		if !ok {
			return nil, fmt.Errorf("probe the applier: a row of %s has a NULL primary key", p.t)
		}
		out = append(out, probeRow{row: row, pk: pk})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("probe the applier: read rows of %s back: %w", p.t, err)
	}
	return out, nil
}

// counterValue is c's count.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
