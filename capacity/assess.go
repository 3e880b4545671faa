package capacity

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// MoveInput is one move as the plan has it: its shards, ranges, the
// source's tables and the preflight's estimates.
type MoveInput struct {
	ID, Source, Target string
	Ranges             []ring.Range
	Tables             []tableset.Table
	Estimates          []tableset.Estimate
}

// Pools returns a shard's pool (the caller owns it).
type Pools func(ctx context.Context, shard string) (*pgxpool.Pool, error)

// AssessOptions are the model's options, the probe's sizes, the WAL
// window and the operator's budgets by shard.
type AssessOptions struct {
	Options
	Probe     ProbeOptions
	WALWindow time.Duration // default DefaultWALWindow
	Budgets   map[string]Budget
}

// Assess probes every shard of the moves (their WAL windows side by side,
// and the row changes of the tables the shard is a source of) and every
// move, and predicts. It changes nothing. Refusals are in the report, not
// the error.
func Assess(ctx context.Context, pools Pools, moves []MoveInput, o AssessOptions) (Report, error) {
	shardSet := map[string]bool{}
	sourceOf := map[string][]tableset.Table{}
	for _, m := range moves {
		shardSet[m.Source], shardSet[m.Target] = true, true
		for _, t := range m.Tables {
			if !slices.ContainsFunc(sourceOf[m.Source], func(u tableset.Table) bool { return u.String() == t.String() }) {
				sourceOf[m.Source] = append(sourceOf[m.Source], t)
			}
		}
	}
	names := make([]string, 0, len(shardSet))
	for n := range shardSet {
		names = append(names, n)
	}
	sort.Strings(names)
	var mu sync.Mutex
	probes := map[string]ShardProbe{}
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range names {
		g.Go(func() error {
			pool, err := pools(gctx, n)
			if err != nil {
				return err
			}
			p, err := ProbeShard(gctx, n, pool, o.WALWindow, sourceOf[n]...)
			if err != nil {
				return err
			}
			mu.Lock()
			probes[n] = p
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Report{}, err
	}
	var ms []Move
	for _, in := range moves {
		m, err := probeMove(ctx, pools, in, probes[in.Source], o.Probe)
		if err != nil {
			return Report{}, fmt.Errorf("capacity probe of move %s (%s → %s): %w", in.ID, in.Source, in.Target, err)
		}
		ms = append(ms, m)
	}
	rep := Predict(ms, probes, o.Budgets, o.Options)
	for _, n := range names {
		rep.Probes = append(rep.Probes, probes[n])
	}
	return rep, nil
}

// probeMove sums the move's estimates with its tables' sizes, takes its
// tables' row changes from the source's probe (sp), and probes its largest
// table.
func probeMove(ctx context.Context, pools Pools, in MoveInput, sp ShardProbe, o ProbeOptions) (Move, error) {
	m := Move{ID: in.ID, Source: in.Source, Target: in.Target, Tables: len(in.Tables)}
	src, err := pools(ctx, in.Source)
	if err != nil {
		return m, err
	}
	dst, err := pools(ctx, in.Target)
	if err != nil {
		return m, err
	}
	type est struct{ rows, bytes int64 }
	byTable := map[string]est{}
	for _, e := range in.Estimates {
		x := byTable[e.Table]
		x.rows += e.Rows
		x.bytes += e.Bytes
		byTable[e.Table] = x
	}
	var (
		largest    *tableset.Table
		largestEst est
	)
	for i := range in.Tables {
		t := &in.Tables[i]
		size, idx, err := TableSizes(ctx, src, *t)
		if err != nil {
			return m, err
		}
		e := byTable[t.String()]
		m.Rows += e.rows
		m.Bytes += e.bytes
		m.SetBytes += size
		if size > 0 {
			m.IndexBytes += int64(float64(e.bytes) * float64(idx) / float64(size))
		}
		m.Changes.AddTable(sp, t.String(), e.bytes, size)
		if largest == nil || e.bytes > largestEst.bytes {
			largest, largestEst = t, e
		}
	}
	if largest == nil || largestEst.rows == 0 {
		return m, nil // nothing to copy: nothing to time
	}
	o.Changes = TableChanges{Inserts: m.Changes.Inserts, Updates: m.Changes.Updates, Deletes: m.Changes.Deletes}
	m.Probe, err = ProbeMove(ctx, src, dst, *largest, in.Ranges, float64(largestEst.bytes)/float64(largestEst.rows), o)
	return m, err
}

// AddTable adds table's row changes in sp's window (ProbeShard's
// Tables) to c, and their moving share (moving of its size bytes) to
// c.Moving.
func (c *ChangeRate) AddTable(sp ShardProbe, table string, moving, size int64) {
	i := slices.IndexFunc(sp.Tables, func(tc TableChanges) bool { return tc.Table == table })
	if i < 0 || sp.WAL.Window <= 0 {
		return
	}
	tc := sp.Tables[i]
	c.Window = sp.WAL.Window
	c.Inserts += tc.Inserts
	c.Updates += tc.Updates
	c.Deletes += tc.Deletes
	share := 1.0
	if size > 0 {
		share = min(float64(moving)/float64(size), 1)
	}
	c.Moving += float64(tc.Changes()) / sp.WAL.Window.Seconds() * share
}
