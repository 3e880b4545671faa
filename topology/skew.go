package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/ring"
)

// Uniform keys are not uniform traffic, nor uniform data: a ring that gives
// every shard the same token space can still put a celebrity account, a hot
// range or a few huge rows on one shard. The skew report measures what each
// shard actually holds and absorbs, per shard and per range, and compares
// shards by max/median rather than by cluster averages.

// SkewTable is a table of the table set and its shard-key column.
type SkewTable struct {
	Name      string // "orders" or "schema.orders"
	KeyColumn string
}

// SkewOptions configure Skew. Zero values take the defaults.
type SkewOptions struct {
	KeyType ring.KeyType // default ring.KeyInt
	Tables  []SkewTable
	// Interval between the two pg_stat_user_tables readings the write rates
	// come from. Default 5s. PostgreSQL publishes a backend's counters when
	// it goes idle, at most once a second, so shorter intervals are noisy.
	Interval time.Duration
	// Tables whose heap is at most ExactBelowBytes are counted exactly;
	// larger ones through TABLESAMPLE SYSTEM reading about SampleBytes,
	// scaled up. Defaults 64 MiB and 64 MiB.
	ExactBelowBytes, SampleBytes int64
	// Top is how many of the hottest ranges to name. Default 5.
	Top int
}

func (o *SkewOptions) defaults() {
	if o.KeyType == "" {
		o.KeyType = ring.KeyInt
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.ExactBelowBytes == 0 {
		o.ExactBelowBytes = 64 << 20
	}
	if o.SampleBytes == 0 {
		o.SampleBytes = 64 << 20
	}
	if o.Top == 0 {
		o.Top = 5
	}
}

// TableFigures are one table on one shard.
type TableFigures struct {
	Table        string  `json:"table"`
	Rows         float64 `json:"rows"`  // estimate (exact when not sampled)
	Bytes        int64   `json:"bytes"` // pg_total_relation_size: heap, indexes, TOAST
	WritesPerSec float64 `json:"writes_per_sec"`
	// SamplePercent is the TABLESAMPLE SYSTEM percentage the per-range
	// counts come from; 100 means an exact count.
	SamplePercent float64 `json:"sample_percent"`
}

// ShardFigures are one shard's totals over the table set.
type ShardFigures struct {
	Shard string `json:"shard"`
	// Space is the fraction of the token space the ring gives the shard.
	Space        float64 `json:"space"`
	Rows         float64 `json:"rows"`
	Bytes        int64   `json:"bytes"`
	WritesPerSec float64 `json:"writes_per_sec"`
	// ForeignRows are rows whose token the ring gives to another shard:
	// leftovers of a move not cleaned up, or writes that bypassed routing.
	ForeignRows float64        `json:"foreign_rows"`
	Tables      []TableFigures `json:"tables"`
}

// RangeFigures are one vnode range of the ring.
type RangeFigures struct {
	Range ring.Range `json:"range"`
	Shard string     `json:"shard"`
	Rows  float64    `json:"rows"`
	// RowShare and SpaceShare are the range's fractions of all rows and of
	// the token space; RowShare/SpaceShare above 1 means denser than average.
	RowShare   float64 `json:"row_share"`
	SpaceShare float64 `json:"space_share"`
}

// Imbalance compares shards on one figure.
type Imbalance struct {
	Hottest string  `json:"hottest"` // the shard with the largest figure
	Max     float64 `json:"max"`
	Median  float64 `json:"median"`
	// Ratio is Max/Median: 1 is perfect balance; +Inf when the median is 0
	// and the max is not.
	Ratio float64 `json:"ratio"`
}

// MarshalJSON writes an infinite ratio as null.
func (im Imbalance) MarshalJSON() ([]byte, error) {
	type plain Imbalance
	var ratio *float64
	if !math.IsInf(im.Ratio, 0) && !math.IsNaN(im.Ratio) {
		ratio = &im.Ratio
	}
	return json.Marshal(struct {
		plain
		Ratio *float64 `json:"ratio"`
	}{plain(im), ratio})
}

// SkewReport is the result of Skew.
type SkewReport struct {
	Version  int64          `json:"ring_version"`
	Interval time.Duration  `json:"interval_ns"`
	Shards   []ShardFigures `json:"shards"`
	Rows     Imbalance      `json:"rows"`
	Bytes    Imbalance      `json:"bytes"`
	Writes   Imbalance      `json:"writes"`
	// HotRanges are the ranges holding the most rows, most first.
	HotRanges []RangeFigures `json:"hot_ranges"`
}

// Skew reads every shard of topo through pools (by shard name) and reports
// rows, bytes and write rates per shard with their max/median ratios, and the
// ranges holding the most rows. It only reads; it takes about opts.Interval
// (or the time counting takes, if longer).
func Skew(ctx context.Context, topo Topology, pools map[string]*pgxpool.Pool, opts SkewOptions) (*SkewReport, error) {
	opts.defaults()
	if len(opts.Tables) == 0 {
		return nil, errors.New("skew: no tables; name the table set's tables and key columns")
	}
	if _, err := ring.ParseKeyType(string(opts.KeyType)); err != nil {
		return nil, fmt.Errorf("skew: %w", err)
	}
	shards := topo.Ring.Shards()
	for _, sh := range shards {
		if pools[sh] == nil {
			return nil, fmt.Errorf("skew: no connection to shard %s (ring version %d)", sh, topo.Version)
		}
	}
	all := topo.Ring.AllRanges()
	// width_bucket(token, thresholds) = number of thresholds <= token. With
	// threshold i = Hi_i + 1 that is the number of ranges ending below the
	// token: the index of the range (Lo, Hi] holding it.
	thresholds := make([]int64, 0, len(all))
	for _, or := range all {
		if or.Range.Hi != ring.MaxToken {
			thresholds = append(thresholds, or.Range.Hi+1)
		}
	}
	shareOf := topo.Ring.Share()
	figs := make([]ShardFigures, len(shards))
	counts := make([][]float64, len(shards)) // rows per range index, per shard
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i, sh := range shards {
		g.Go(func() error {
			f, c, err := readShard(gctx, pools[sh], sh, len(all), thresholds, opts)
			if err != nil {
				return fmt.Errorf("skew: shard %s: %w", sh, err)
			}
			f.Space = shareOf[sh]
			figs[i], counts[i] = f, c
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	rep := &SkewReport{Version: topo.Version, Interval: opts.Interval, Shards: figs}
	var total float64
	ranges := make([]RangeFigures, len(all))
	for ri, or := range all {
		ranges[ri] = RangeFigures{Range: or.Range, Shard: or.Shard, SpaceShare: or.Range.Width() / math.Exp2(64)}
	}
	for si, sh := range shards {
		for ri, n := range counts[si] {
			if all[ri].Shard == sh {
				ranges[ri].Rows += n
				total += n
			} else {
				figs[si].ForeignRows += n
			}
		}
	}
	for ri := range ranges {
		if total > 0 {
			ranges[ri].RowShare = ranges[ri].Rows / total
		}
	}
	slices.SortStableFunc(ranges, func(a, b RangeFigures) int {
		switch {
		case a.Rows > b.Rows:
			return -1
		case a.Rows < b.Rows:
			return 1
		}
		return 0
	})
	for _, r := range ranges[:min(opts.Top, len(ranges))] {
		if r.Rows > 0 {
			rep.HotRanges = append(rep.HotRanges, r)
		}
	}
	rep.Rows = imbalance(figs, func(f ShardFigures) float64 { return f.Rows })
	rep.Bytes = imbalance(figs, func(f ShardFigures) float64 { return float64(f.Bytes) })
	rep.Writes = imbalance(figs, func(f ShardFigures) float64 { return f.WritesPerSec })
	return rep, nil
}

func imbalance(figs []ShardFigures, val func(ShardFigures) float64) Imbalance {
	if len(figs) == 0 {
		return Imbalance{}
	}
	vs := make([]float64, len(figs))
	var im Imbalance
	for i, f := range figs {
		vs[i] = val(f)
		if i == 0 || vs[i] > im.Max {
			im.Max, im.Hottest = vs[i], f.Shard
		}
	}
	slices.Sort(vs)
	if n := len(vs); n%2 == 1 {
		im.Median = vs[n/2]
	} else {
		im.Median = (vs[n/2-1] + vs[n/2]) / 2
	}
	switch {
	case im.Max == 0:
		im.Ratio, im.Hottest = 1, ""
	case im.Median == 0:
		im.Ratio = math.Inf(1)
	default:
		im.Ratio = im.Max / im.Median
	}
	return im
}

type skewTable struct {
	SkewTable
	quoted string // schema-qualified, quoted
	oid    uint32
}

// readShard reads one shard: write counters, sizes and per-range counts,
// then the write counters again once opts.Interval has passed.
func readShard(ctx context.Context, pool *pgxpool.Pool, shard string, nRanges int, thresholds []int64, opts SkewOptions) (ShardFigures, []float64, error) {
	f := ShardFigures{Shard: shard}
	tables := make([]skewTable, len(opts.Tables))
	for i, t := range opts.Tables {
		tables[i] = skewTable{SkewTable: t, quoted: pgx.Identifier(strings.Split(t.Name, ".")).Sanitize()}
		var oid *uint32
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1)::oid`, tables[i].quoted).Scan(&oid); err != nil {
			return f, nil, fmt.Errorf("table %s: %w", t.Name, err)
		}
		if oid == nil {
			return f, nil, fmt.Errorf("table %s does not exist (check the name and schema)", t.Name)
		}
		tables[i].oid = *oid
	}
	before, t0, err := writeCounters(ctx, pool, tables)
	if err != nil {
		return f, nil, err
	}
	counts := make([]float64, nRanges)
	for _, t := range tables {
		tf, err := readTable(ctx, pool, t, thresholds, counts, opts)
		if err != nil {
			return f, nil, fmt.Errorf("table %s: %w", t.Name, err)
		}
		f.Tables = append(f.Tables, tf)
	}
	select {
	case <-ctx.Done():
		return f, nil, ctx.Err()
	case <-time.After(time.Until(t0.Add(opts.Interval))):
	}
	after, t1, err := writeCounters(ctx, pool, tables)
	if err != nil {
		return f, nil, err
	}
	secs := t1.Sub(t0).Seconds()
	for i := range f.Tables {
		f.Tables[i].WritesPerSec = float64(after[i]-before[i]) / secs
		f.Rows += f.Tables[i].Rows
		f.Bytes += f.Tables[i].Bytes
		f.WritesPerSec += f.Tables[i].WritesPerSec
	}
	return f, counts, nil
}

// writeCounters reads n_tup_ins + n_tup_upd + n_tup_del of each table.
func writeCounters(ctx context.Context, pool *pgxpool.Pool, tables []skewTable) ([]int64, time.Time, error) {
	out := make([]int64, len(tables))
	now := time.Now()
	for i, t := range tables {
		err := pool.QueryRow(ctx, `SELECT coalesce((SELECT n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relid = $1), 0)`, t.oid).Scan(&out[i])
		if err != nil {
			return nil, now, fmt.Errorf("write counters of %s: %w", t.Name, err)
		}
	}
	return out, now, nil
}

func readTable(ctx context.Context, pool *pgxpool.Pool, t skewTable, thresholds []int64, counts []float64, opts SkewOptions) (TableFigures, error) {
	tf := TableFigures{Table: t.Name, SamplePercent: 100}
	var (
		reltuples float64
		heap      int64
	)
	if err := pool.QueryRow(ctx, `SELECT reltuples, pg_total_relation_size(oid), pg_relation_size(oid) FROM pg_class WHERE oid = $1`, t.oid).
		Scan(&reltuples, &tf.Bytes, &heap); err != nil {
		return tf, fmt.Errorf("size: %w", err)
	}
	tok := ring.TokenSQL(opts.KeyType, "", t.KeyColumn)
	from := t.quoted
	if heap > opts.ExactBelowBytes {
		tf.SamplePercent = max(0.01, min(100, 100*float64(opts.SampleBytes)/float64(heap)))
		from += fmt.Sprintf(" TABLESAMPLE SYSTEM (%g)", tf.SamplePercent)
	}
	sql := `SELECT width_bucket(` + tok + `, $1::bigint[]), count(*) FROM ` + from +
		` WHERE ` + pgx.Identifier{t.KeyColumn}.Sanitize() + ` IS NOT NULL GROUP BY 1`
	rows, err := pool.Query(ctx, sql, thresholds)
	if err != nil {
		return tf, fmt.Errorf("count rows per range: %w", err)
	}
	scale := 100 / tf.SamplePercent
	var counted float64
	var bucket int32
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&bucket, &n}, func() error {
		if int(bucket) < 0 || int(bucket) >= len(counts) {
			return fmt.Errorf("range index %d out of %d ranges", bucket, len(counts))
		}
		counts[bucket] += float64(n) * scale
		counted += float64(n) * scale
		return nil
	})
	if err != nil {
		return tf, fmt.Errorf("count rows per range: %w", err)
	}
	tf.Rows = counted
	if tf.SamplePercent < 100 && reltuples >= 0 {
		tf.Rows = reltuples // the planner's estimate beats a scaled page sample
	}
	return tf, nil
}

// SkewDefaults fills what o leaves out from keyspace's registration: its
// tables when o names none, its key type unless keyTypeGiven. Tables named
// in a cluster with no keyspace are read as bigint keys unless a key type
// is given; with neither tables nor a keyspace, the error is ErrNoKeyspace.
func (s *Store) SkewDefaults(ctx context.Context, keyspace string, o *SkewOptions, keyTypeGiven bool) error {
	if len(o.Tables) > 0 && keyTypeGiven {
		return nil
	}
	ks, err := s.ResolveKeyspace(ctx, keyspace)
	if errors.Is(err, ErrNoKeyspace) && len(o.Tables) > 0 {
		o.KeyType = ring.KeyInt // tables named without a keyspace: bigint unless given
		return nil
	}
	if err != nil {
		return err
	}
	if !keyTypeGiven {
		o.KeyType = ks.KeyType
	}
	if len(o.Tables) == 0 {
		for _, t := range ks.Tables {
			o.Tables = append(o.Tables, SkewTable{Name: strings.TrimSuffix(TableKey(t), ":"+t.KeyColumn), KeyColumn: t.KeyColumn})
		}
	}
	return nil
}
