package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/verify"
)

// DefaultWALWindow is how long the probe watches a source's WAL position.
const DefaultWALWindow = 2 * time.Second

// walSample is pg_stat_wal's counters and the WAL position at one moment.
type walSample struct {
	at                  time.Time
	lsn                 int64 // pg_current_wal_lsn() − '0/0'
	records, fpi, bytes int64
}

func readWAL(ctx context.Context, pool *pgxpool.Pool) (walSample, error) {
	s := walSample{at: time.Now()}
	err := pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint, wal_records, wal_fpi, wal_bytes::bigint FROM pg_stat_wal`).Scan(&s.lsn, &s.records, &s.fpi, &s.bytes)
	return s, err
}

// ProbeShard reads what bounds a slot on the shard and its WAL rate over
// window (DefaultWALWindow when zero): pg_stat_wal's records, full-page
// images and bytes in sub-windows of about a second, and the last
// checkpoint's start (pg_control_checkpoint()), for the rule of
// SteadyWALRate. It changes nothing.
func ProbeShard(ctx context.Context, name string, pool *pgxpool.Pool, window time.Duration) (ShardProbe, error) {
	if window <= 0 {
		window = DefaultWALWindow
	}
	p := ShardProbe{Shard: name, WALWindow: window}
	var keepMB, maxWALMB, timeoutS int64
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
		(SELECT setting::bigint FROM pg_settings WHERE name = 'max_wal_size'),
		(SELECT setting::bigint FROM pg_settings WHERE name = 'checkpoint_timeout')`).Scan(&keepMB, &maxWALMB, &timeoutS); err != nil {
		return p, fmt.Errorf("probe %s: read max_slot_wal_keep_size, max_wal_size and checkpoint_timeout: %w", name, err)
	}
	p.MaxSlotWALKeep, p.MaxWALSize = -1, maxWALMB<<20 // both in MB
	if keepMB >= 0 {
		p.MaxSlotWALKeep = keepMB << 20
	}
	rtts := make([]time.Duration, 5)
	for i := range rtts {
		start := time.Now()
		if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
			return p, fmt.Errorf("probe %s: %w", name, err)
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	p.RTT = rtts[len(rtts)/2]
	// Sub-windows of about a second: a backend flushes its WAL counters to
	// pg_stat_wal at most once a second (PGSTAT_MIN_INTERVAL).
	n := min(max(int(window/time.Second), 2), 30)
	samples := make([]walSample, 0, n+1)
	s, err := readWAL(ctx, pool)
	if err != nil {
		return p, fmt.Errorf("probe %s: read the WAL position and pg_stat_wal: %w", name, err)
	}
	samples = append(samples, s)
	for i := 1; i <= n; i++ {
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(time.Until(samples[0].at.Add(window * time.Duration(i) / time.Duration(n)))):
		}
		s, err := readWAL(ctx, pool)
		if err != nil {
			return p, fmt.Errorf("probe %s: read the WAL position and pg_stat_wal: %w", name, err)
		}
		samples = append(samples, s)
	}
	first, last := samples[0], samples[len(samples)-1]
	r := WALReading{Window: last.at.Sub(first.at), Bytes: last.lsn - first.lsn, StatBytes: last.bytes - first.bytes,
		Records: last.records - first.records, FPI: last.fpi - first.fpi, CheckpointTimeout: time.Duration(timeoutS) * time.Second,
		MaxWALSize: p.MaxWALSize, SinceCheckpoint: -1}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		r.Parts = append(r.Parts, WALPart{Records: b.records - a.records, FPI: b.fpi - a.fpi, Bytes: b.bytes - a.bytes})
	}
	var since float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - checkpoint_time)::float8 FROM pg_control_checkpoint()`).Scan(&since); err == nil {
		r.SinceCheckpoint = time.Duration(since * float64(time.Second))
	}
	p.WAL = r
	p.WALBytesPerSec = r.SteadyRate()
	return p, nil
}

// TableSizes are t's size (pg_table_size: heap and TOAST) and its indexes'
// (pg_indexes_size) on one shard.
func TableSizes(ctx context.Context, pool *pgxpool.Pool, t tableset.Table) (table, indexes int64, err error) {
	err = pool.QueryRow(ctx, `SELECT pg_table_size(c.oid), pg_indexes_size(c.oid) FROM pg_class c WHERE c.oid = $1::regclass`, t.Quoted()).Scan(&table, &indexes)
	if err != nil {
		return 0, 0, fmt.Errorf("read the size of %s: %w", t, err)
	}
	return table, indexes, nil
}

// ProbeOptions size the move's samples.
type ProbeOptions struct {
	ChunkRows  int // the copy's chunk (default 5000)
	VerifyRows int // the verify's chunk (default 50000)
}

// probeTable is the temporary table the sample chunk is copied into.
const probeTable = "reshard_capacity_probe"

// pagingSettings are the copy's own (backfill): its chunks read by index.
const pagingSettings = "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL max_parallel_workers_per_gather = 0"

// ProbeMove times one chunk of t's rows in ranges (the first by primary
// key, as the copy reads them; the table's first rows when the ranges hold
// too few) copied from src into a temporary table shaped like t on dst, in
// a transaction rolled back, and one verify checksum of a verify chunk on
// src. bytesPerRow converts rows into the estimates' bytes. It changes
// nothing on either side.
func ProbeMove(ctx context.Context, src, dst *pgxpool.Pool, t tableset.Table, ranges []ring.Range, bytesPerRow float64, o ProbeOptions) (MoveProbe, error) {
	if o.ChunkRows <= 0 {
		o.ChunkRows = 5000
	}
	if o.VerifyRows <= 0 {
		o.VerifyRows = 50_000
	}
	p := MoveProbe{Table: t.String()}
	if len(t.PK) == 0 {
		return p, fmt.Errorf("probe %s: it has no primary key", t)
	}
	var cols []string
	for _, c := range t.WritableColumns() {
		cols = append(cols, pgx.Identifier{c.Name}.Sanitize())
	}
	var pk []string
	for _, c := range t.PK {
		pk = append(pk, pgx.Identifier{"t", c}.Sanitize())
	}
	pred := ring.ScanPredicate(t.TokenSQL("t"), ring.Normalize(ranges))
	var inRanges int64
	if err := src.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM %s AS t WHERE %s LIMIT %d) s`, t.Quoted(), pred, o.ChunkRows)).Scan(&inRanges); err != nil {
		return p, fmt.Errorf("probe %s: %w", t, err)
	}
	if inRanges < int64(o.ChunkRows)/10 {
		pred = "true" // a sparse range says little of the rate: the table's first rows
	}
	from := fmt.Sprintf(`FROM %s AS t WHERE %s ORDER BY %s`, t.Quoted(), pred, strings.Join(pk, ", "))
	var err error
	p.SampleRows, p.CopyTime, err = copySample(ctx, src, dst, t, fmt.Sprintf(`SELECT %s %s LIMIT %d`, strings.Join(cols, ", "), from, o.ChunkRows), cols)
	if err != nil {
		return p, err
	}
	p.SampleBytes = int64(float64(p.SampleRows) * bytesPerRow)

	start := time.Now()
	err = readOnly(ctx, src, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*), coalesce(bit_xor(h), 0), coalesce(sum(h), 0)::text FROM (SELECT %s AS h %s LIMIT %d) s`,
			verify.RowHash(t, "t"), from, o.VerifyRows)).Scan(&p.VerifyRows, new(int64), new(string))
	})
	if err != nil {
		return p, fmt.Errorf("probe %s: checksum a verify chunk: %w", t, err)
	}
	p.VerifyTime = time.Since(start)
	p.VerifyBytes = int64(float64(p.VerifyRows) * bytesPerRow)

	for _, pool := range []*pgxpool.Pool{src, dst} {
		d, err := fenceSample(ctx, pool)
		if err != nil {
			return p, fmt.Errorf("probe %s: time a fence function: %w", t, err)
		}
		p.FenceTime = max(p.FenceTime, d)
	}
	return p, nil
}

// readOnly runs f in a read-only transaction with the copy's paging settings.
func readOnly(ctx context.Context, pool *pgxpool.Pool, f func(pgx.Tx) error) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL application_name = 'reshard capacity'; "+pagingSettings); err != nil {
		return err
	}
	return f(tx)
}

// copySample streams sel from src as binary COPY into a temporary table
// like t on dst and rolls it back: the copy's work, with the same rows,
// without its WAL on the target.
func copySample(ctx context.Context, src, dst *pgxpool.Pool, t tableset.Table, sel string, cols []string) (int64, time.Duration, error) {
	dtx, err := dst.Begin(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("probe %s: %w", t, err)
	}
	defer func() { _ = dtx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := dtx.Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING INDEXES) ON COMMIT DROP`,
		probeTable, t.Quoted())); err != nil {
		return 0, 0, fmt.Errorf("probe %s: create a temporary table like it on the target: %w", t, err)
	}
	pr, pw := io.Pipe()
	start := time.Now()
	read := make(chan error, 1)
	go func() {
		err := readOnly(ctx, src, func(tx pgx.Tx) error {
			_, err := tx.Conn().PgConn().CopyTo(ctx, pw, "COPY ("+sel+") TO STDOUT (FORMAT binary)")
			return err
		})
		pw.CloseWithError(err)
		read <- err
	}()
	tag, werr := dtx.Conn().PgConn().CopyFrom(ctx, pr, fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", probeTable, strings.Join(cols, ", ")))
	pr.CloseWithError(errors.New("the target stopped reading"))
	rerr := <-read
	elapsed := time.Since(start)
	if rerr != nil {
		return 0, 0, fmt.Errorf("probe %s: read a chunk on the source: %w", t, rerr)
	}
	if werr != nil {
		return 0, 0, fmt.Errorf("probe %s: write a chunk on the target: %w", t, werr)
	}
	return tag.RowsAffected(), elapsed, nil
}

// fenceSample times replacing a plpgsql trigger function the size of a
// fence's (a multirange compiled in), in a transaction rolled back.
func fenceSample(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	start := time.Now()
	_, err = tx.Exec(ctx, `CREATE OR REPLACE FUNCTION pg_temp.reshard_capacity_probe() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF '{(-9223372036854775808,-4611686018427387904], (0,4611686018427387904]}'::int8multirange @> hashint8extended(NEW.id, 0) THEN
		RAISE EXCEPTION 'fenced' USING ERRCODE = 'RSF01';
	END IF;
	RETURN NEW;
END $f$`)
	return time.Since(start), err
}
