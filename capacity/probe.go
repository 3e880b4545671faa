package capacity

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"math/rand/v2"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/internal/pgerr"
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

// readWALSettings reads max_slot_wal_keep_size (-1: unlimited) and
// max_wal_size in bytes, and checkpoint_timeout.
func readWALSettings(ctx context.Context, pool *pgxpool.Pool) (keep, maxWAL int64, timeout time.Duration, err error) {
	var keepMB, maxWALMB, timeoutS int64
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT setting::bigint FROM pg_settings WHERE name = 'max_slot_wal_keep_size'),
		(SELECT setting::bigint FROM pg_settings WHERE name = 'max_wal_size'),
		(SELECT setting::bigint FROM pg_settings WHERE name = 'checkpoint_timeout')`).Scan(&keepMB, &maxWALMB, &timeoutS); err != nil {
		return 0, 0, 0, fmt.Errorf("read max_slot_wal_keep_size, max_wal_size and checkpoint_timeout: %w", err)
	}
	keep = -1
	if keepMB >= 0 {
		keep = keepMB << 20 // MB
	}
	return keep, maxWALMB << 20, time.Duration(timeoutS) * time.Second, nil
}

// readSinceCheckpoint is the time since the last checkpoint's start
// (pg_control_checkpoint().checkpoint_time), -1 when it cannot be read.
func readSinceCheckpoint(ctx context.Context, pool *pgxpool.Pool) time.Duration {
	var since float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - checkpoint_time)::float8 FROM pg_control_checkpoint()`).Scan(&since); err != nil {
		return -1
	}
	return time.Duration(since * float64(time.Second))
}

// walReadingOf is the reading of samples (at least one; SinceCheckpoint
// not read: -1): the window from the first to the last, pg_stat_wal's
// counters over it and by sub-window between consecutive samples.
func walReadingOf(samples []walSample, timeout time.Duration, maxWAL int64) WALReading {
	first, last := samples[0], samples[len(samples)-1]
	r := WALReading{Window: last.at.Sub(first.at), Bytes: last.lsn - first.lsn, StatBytes: last.bytes - first.bytes,
		Records: last.records - first.records, FPI: last.fpi - first.fpi, CheckpointTimeout: timeout,
		MaxWALSize: maxWAL, SinceCheckpoint: -1, End: last.at}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		r.Parts = append(r.Parts, WALPart{Records: b.records - a.records, FPI: b.fpi - a.fpi, Bytes: b.bytes - a.bytes})
	}
	return r
}

// WALMeter reads a shard's WAL as ProbeShard's window does (pg_stat_wal's
// records, full-page images and bytes, by sub-window), over a span not
// bounded in advance: a copy's first tenth, for the slot's WAL at 10 %
// (SlotWALAt). Sample it about once a second (a backend flushes its WAL
// counters at most once a second); Reading ends the span. Not safe for
// concurrent use.
type WALMeter struct {
	pool    *pgxpool.Pool
	timeout time.Duration
	maxWAL  int64
	samples []walSample
}

// StartWALMeter reads the shard's checkpoint settings and starts the span.
func StartWALMeter(ctx context.Context, pool *pgxpool.Pool) (*WALMeter, error) {
	_, maxWAL, timeout, err := readWALSettings(ctx, pool)
	if err != nil {
		return nil, err
	}
	m := &WALMeter{pool: pool, timeout: timeout, maxWAL: maxWAL}
	return m, m.Sample(ctx)
}

// Sample ends a sub-window and starts the next.
func (m *WALMeter) Sample(ctx context.Context) error {
	s, err := readWAL(ctx, m.pool)
	if err != nil {
		return fmt.Errorf("read the WAL position and pg_stat_wal: %w", err)
	}
	m.samples = append(m.samples, s)
	return nil
}

// Reading samples once more and gives the span's reading, with the time
// since the last checkpoint now.
func (m *WALMeter) Reading(ctx context.Context) (WALReading, error) {
	if err := m.Sample(ctx); err != nil {
		return WALReading{}, err
	}
	r := walReadingOf(m.samples, m.timeout, m.maxWAL)
	r.SinceCheckpoint = readSinceCheckpoint(ctx, m.pool)
	return r, nil
}

// ProbeShard reads what bounds a slot on the shard and its WAL rate over
// window (DefaultWALWindow when zero): pg_stat_wal's records, full-page
// images and bytes in sub-windows of about a second, and the last
// checkpoint's start (pg_control_checkpoint()), for the rule of
// SteadyWALRate; and over the same window the row changes made to tables
// (pg_stat_user_tables), what a catch-up from the shard applies. It
// changes nothing.
func ProbeShard(ctx context.Context, name string, pool *pgxpool.Pool, window time.Duration, tables ...tableset.Table) (ShardProbe, error) {
	if window <= 0 {
		window = DefaultWALWindow
	}
	p := ShardProbe{Shard: name, WALWindow: window}
	keep, maxWAL, timeout, err := readWALSettings(ctx, pool)
	if err != nil {
		return p, fmt.Errorf("probe %s: %w", name, err)
	}
	p.MaxSlotWALKeep, p.MaxWALSize = keep, maxWAL
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
	var dec *decodeProbe
	if len(tables) > 0 { // a source: its decoding, over the window
		dec = startDecode(ctx, pool)
		defer func() {
			if dec != nil { // returned early: the slot goes
				dec.finish(context.WithoutCancel(ctx))
			}
		}()
	}
	s, err := readWAL(ctx, pool)
	if err != nil {
		return p, fmt.Errorf("probe %s: read the WAL position and pg_stat_wal: %w", name, err)
	}
	samples = append(samples, s)
	changes0, err := readChanges(ctx, pool, tables)
	if err != nil {
		return p, fmt.Errorf("probe %s: %w", name, err)
	}
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
	changes1, err := readChanges(ctx, pool, tables)
	if err != nil {
		return p, fmt.Errorf("probe %s: %w", name, err)
	}
	if dec != nil {
		p.Decode, dec = dec.finish(ctx), nil
	}
	for i, t := range tables {
		a, b := changes0[i], changes1[i]
		p.Tables = append(p.Tables, TableChanges{Table: t.String(), Inserts: b.Inserts - a.Inserts, Updates: b.Updates - a.Updates, Deletes: b.Deletes - a.Deletes})
	}
	r := walReadingOf(samples, timeout, maxWAL)
	r.SinceCheckpoint = readSinceCheckpoint(ctx, pool)
	p.WAL = r
	p.WALBytesPerSec = r.SteadyRate()
	return p, nil
}

// readChanges reads the rows inserted, updated and deleted in each of
// tables so far (pg_stat_user_tables; a backend reports its counts at most
// once a second, as it does pg_stat_wal's).
func readChanges(ctx context.Context, pool *pgxpool.Pool, tables []tableset.Table) ([]TableChanges, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Quoted()
	}
	rows, err := pool.Query(ctx, `SELECT coalesce(s.n_tup_ins, 0), coalesce(s.n_tup_upd, 0), coalesce(s.n_tup_del, 0)
		FROM unnest($1::text[]) WITH ORDINALITY AS q(name, i) LEFT JOIN pg_stat_user_tables s ON s.relid = q.name::regclass ORDER BY q.i`, names)
	if err != nil {
		return nil, fmt.Errorf("read the row changes of %d tables (pg_stat_user_tables): %w", len(tables), err)
	}
	out := make([]TableChanges, 0, len(tables))
	for rows.Next() {
		var c TableChanges
		if err := rows.Scan(&c.Inserts, &c.Updates, &c.Deletes); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the row changes of %d tables (pg_stat_user_tables): %w", len(tables), err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the row changes of %d tables (pg_stat_user_tables): %w", len(tables), err)
	}
	return out, nil
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
	ChunkRows      int // the copy's chunk (0: backfill's default)
	VerifyRows     int // the verify's chunk (0: verify's default)
	VerifyParallel int // the verify's workers (0: verify's default)
	// The copy's probe runs until it has copied MinBytes (default 32 MiB)
	// in at least MinTime (default 3 s), or for MaxTime (default 15 s), and
	// the verify's until MinTime and a chunk per worker, or MaxTime: long
	// enough that a chunk's fixed costs and the first cold pages weigh
	// little (a 5,000-row sample ran at a third of the copy's rate), short
	// enough that PLAN, which probes its moves one after the other, takes
	// at most half a minute a move.
	MinBytes         int64
	MinTime, MaxTime time.Duration
	// Changes weigh the kinds of change the applier's probe applies: the
	// source's inserts, updates and deletes (all zero: updates).
	Changes TableChanges
}

func (o ProbeOptions) withDefaults() ProbeOptions {
	if o.MinBytes <= 0 {
		o.MinBytes = 32 << 20
	}
	if o.MinTime <= 0 {
		o.MinTime = 3 * time.Second
	}
	if o.MaxTime <= 0 {
		o.MaxTime = 15 * time.Second
	}
	return o
}

// ProbeMove times the copy's, the verify's and the stream's own work on
// t's rows in ranges: backfill.Probe (the copy's chunks, in its order and
// statement, written into tables like t on dst in transactions rolled
// back), and, before the rollback, verify.Probe (the verify's chunk
// checksums with its workers a side, on src's moving rows and at the same
// time on the rows those transactions hold on dst: the pair's rate is the
// verify's, slowed where the two servers share CPUs), then cdc.ProbeApply
// (a catch-up's batch of changes applied to the rows of the transaction
// holding most, by the applier's statements, in the kinds of o.Changes).
// bytesPerRow converts rows into the estimates' bytes. It records what
// else ran on both servers meanwhile. It changes nothing on either side.
func ProbeMove(ctx context.Context, src, dst *pgxpool.Pool, t tableset.Table, ranges []ring.Range, bytesPerRow float64, o ProbeOptions) (MoveProbe, error) {
	o = o.withDefaults()
	p := MoveProbe{Table: t.String()}
	if len(t.PK) == 0 {
		return p, fmt.Errorf("probe %s: it has no primary key", t)
	}
	// A target transaction for each of the verify's workers, from dst's
	// pool, which the load's sampler shares.
	workers := o.VerifyParallel
	if workers <= 0 {
		workers = 2 // verify.Options' default
	}
	workers = min(workers, max(int(dst.Config().MaxConns)-1, 1))
	load := startLoad(ctx, src, dst)
	var vp verify.ProbeStats
	then := func(ctx context.Context, held []backfill.Held) (err error) {
		targets := make([]verify.ProbeTarget, len(held))
		most := held[0]
		for i, h := range held {
			targets[i] = verify.ProbeTarget{Tx: h.Tx, Table: h.Into.Ident(), Rows: h.Rows}
			if h.Rows > most.Rows {
				most = h
			}
		}
		if vp, err = verify.Probe(ctx, src, t, ranges, verify.ProbeOptions{ChunkRows: o.VerifyRows, Parallel: workers, Targets: targets, MinTime: o.MinTime, MaxTime: o.MaxTime}); err != nil {
			return err
		}
		st, err := cdc.ProbeApply(ctx, most.Tx, most.Into, cdc.ApplyProbeOptions{Ranges: ranges,
			Inserts: float64(o.Changes.Inserts), Updates: float64(o.Changes.Updates), Deletes: float64(o.Changes.Deletes)})
		p.ApplyChanges, p.ApplyTime, p.ApplyStaged = st.Changes(), st.Elapsed, st.Staged
		if err != nil {
			return err
		}
		// The cleanup's deletes, on the copied rows of a transaction the
		// applier's probe left alone (it changed most's).
		del := most
		for _, h := range held {
			if h.Tx != most.Tx && h.Rows > 0 {
				del = h
				break
			}
		}
		p.CleanupDeleteRows, p.CleanupDeleteTime, err = backfill.ProbeDelete(ctx, del.Tx, del.Into, CleanupBatchRows, del.Rows)
		return err
	}
	cp, err := backfill.Probe(ctx, src, dst, t, backfill.ProbeOptions{Ranges: ranges, ChunkRows: o.ChunkRows, MinBytes: o.MinBytes, MinTime: o.MinTime, MaxTime: o.MaxTime,
		Hold: workers, Then: then})
	if err != nil {
		return p, fmt.Errorf("probe %s: %w", t, err)
	}
	p.SampleRows, p.CopyTime, p.CopyChunks, p.CopyOrder, p.CopyWireBytes, p.CopyParts = cp.Rows, cp.Elapsed, cp.Chunks, string(cp.Order), cp.Bytes, cp.Segments
	p.VerifyChunks, p.VerifyPlanned = vp.Chunks, vp.Planned
	p.SampleBytes = int64(float64(p.SampleRows) * bytesPerRow)
	p.VerifyRows, p.VerifyTime, p.VerifyWorkers = vp.Rows, vp.Elapsed, vp.Workers
	p.VerifyBytes = int64(float64(p.VerifyRows) * bytesPerRow)
	p.VerifyTargetRows, p.VerifyTargetBytes = vp.TargetRows, int64(float64(vp.TargetRows)*bytesPerRow)
	p.VerifySourceBusy, p.VerifyTargetBusy = vp.SourceBusy, vp.TargetBusy
	p.Load = load()
	// The cleanup's search on the source (read only) and the WAL of its
	// page images (written there, rolled back): after the copy's and the
	// verify's probes, so as not to slow them.
	if p.CleanupFindRows, p.CleanupFindTime, err = backfill.ProbeFind(ctx, src, t, ranges, CleanupBatchRows, o.MinTime); err != nil {
		return p, fmt.Errorf("probe %s: %w", t, err)
	}
	p.ImageBytes, p.ImageTime, p.ImageNotMeasured = timeImages(ctx, src, imageProbeBytes)

	for _, pool := range []*pgxpool.Pool{src, dst} {
		d, err := fenceSample(ctx, pool)
		if err != nil {
			return p, fmt.Errorf("probe %s: time a fence function: %w", t, err)
		}
		p.FenceTime = max(p.FenceTime, d)
	}
	p.Done = time.Now()
	return p, nil
}

// activeSQL counts the servers' sessions running a statement, this one
// and the probe's own left out (the copy probe's application_name is the
// copy's).
const activeSQL = `SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND backend_type = 'client backend'
	AND pid <> pg_backend_pid() AND application_name NOT LIKE 'reshard%'`

// startLoad samples what else runs on src and dst every second until the
// returned function is called, which returns what it saw: the other
// sessions running a statement on each (the mean over the samples), and
// the load average of the host the probe runs on (which shares the
// servers' CPUs when they run on it too, as in tests and the bench).
func startLoad(ctx context.Context, src, dst *pgxpool.Pool) func() ProbeLoad {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan ProbeLoad, 1)
	go func() {
		var l ProbeLoad
		var n, sSum, dSum int64
		var la float64
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			var s, d int64
			if src.QueryRow(ctx, activeSQL).Scan(&s) == nil && dst.QueryRow(ctx, activeSQL).Scan(&d) == nil {
				n++
				sSum += s
				dSum += d
				if v, ok := loadAverage(); ok {
					la = max(la, v)
				}
			}
			select {
			case <-ctx.Done():
				if n > 0 {
					l.SourceActive, l.TargetActive = float64(sSum)/float64(n), float64(dSum)/float64(n)
				}
				l.HostLoad = la
				done <- l
				return
			case <-tick.C:
			}
		}
	}()
	return func() ProbeLoad { cancel(); return <-done }
}

// loadAverage is the host's 1-minute load average (/proc/loadavg).
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
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

// decodeSlotWait bounds the creation of the decoding probe's slot: a
// logical slot's creation waits for the transactions running at that
// moment to end, which a long report can make minutes. A variable for the
// test that holds it.
var decodeSlotWait = 3 * time.Second

// decodeProbe is a temporary logical slot created before a shard's WAL
// window (test_decoding: in contrib, no publication needed), whose WAL of
// the window is then decoded once, timed (DecodeReading).
type decodeProbe struct {
	conn   *pgxpool.Conn
	slot   string
	reason string // why it was not created
	// The same window streamed by the source's walsender, as the stream
	// reads it: a replication connection (connected in connect) and its
	// own temporary slot, or why not (replReason).
	repl       *pgconn.PgConn
	connect    time.Duration
	replReason string
}

func startDecode(ctx context.Context, pool *pgxpool.Pool) *decodeProbe {
	d := &decodeProbe{slot: fmt.Sprintf("reshard_capacity_probe_%d_%d", os.Getpid(), rand.Uint32())}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		d.reason = "no connection: " + err.Error()
		return d
	}
	_, err = conn.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d", decodeSlotWait.Milliseconds()))
	if err == nil {
		_, err = conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)`, d.slot)
		if _, rerr := conn.Exec(ctx, "RESET statement_timeout"); err == nil {
			err = rerr
		}
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeQueryCanceled:
		d.reason = "no temporary logical slot (test_decoding) within " + decodeSlotWait.String() + ", its creation waiting for the transactions running then to end"
	case err != nil:
		d.reason = "no temporary logical slot (test_decoding): " + err.Error()
	}
	if err != nil {
		discard(ctx, conn)
		return d
	}
	d.conn = conn
	d.startStream(ctx, pool)
	return d
}

// startStream connects to the source for replication with pool's
// settings, as the stream does (timed: DecodeReading.StreamConnect), and
// creates the walsender's temporary slot (test_decoding), bounded by
// decodeSlotWait as the SQL one.
func (d *decodeProbe) startStream(ctx context.Context, pool *pgxpool.Pool) {
	cfg := pool.Config().ConnConfig.Config.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["replication"] = "database"
	start := time.Now()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		d.replReason = "no replication connection: " + err.Error()
		return
	}
	d.connect = time.Since(start)
	cctx, cancel := context.WithTimeout(ctx, decodeSlotWait)
	_, err = pglogrepl.CreateReplicationSlot(cctx, conn, d.slot+"_w", "test_decoding", pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	cancel()
	if err != nil {
		d.replReason = "no temporary logical slot on a replication connection (test_decoding): " + err.Error()
		conn.Close(context.WithoutCancel(ctx))
		return
	}
	d.repl = conn
}

// streamTo streams the walsender's slot from its start until the
// walsender has decoded past upto (an XLogData or a keepalive at or past
// it), and times it; its slot goes with the connection, which it closes.
func (d *decodeProbe) streamTo(ctx context.Context, upto pglogrepl.LSN, r *DecodeReading) {
	defer d.closeStream(ctx)
	if d.replReason != "" {
		r.StreamNotMeasured = d.replReason
		return
	}
	sctx, cancel := context.WithTimeout(ctx, streamProbeWait)
	defer cancel()
	var restart pglogrepl.LSN
	err := d.conn.QueryRow(ctx, `SELECT restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, d.slot+"_w").Scan(&restart)
	start := time.Now()
	if err == nil {
		err = pglogrepl.StartReplication(sctx, d.repl, d.slot+"_w", 0, pglogrepl.StartReplicationOptions{PluginArgs: []string{`"skip-empty-xacts" '1'`}})
	}
	for err == nil {
		var msg pgproto3.BackendMessage
		if msg, err = d.repl.ReceiveMessage(sctx); err != nil {
			break
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 {
			if e, ok := msg.(*pgproto3.ErrorResponse); ok {
				err = pgconn.ErrorResponseToPgError(e)
			}
			continue
		}
		var at pglogrepl.LSN
		switch cd.Data[0] {
		case pglogrepl.XLogDataByteID:
			x, perr := pglogrepl.ParseXLogData(cd.Data[1:])
			err, at = perr, x.WALStart
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, perr := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			err, at = perr, k.ServerWALEnd
		}
		if err == nil && at >= upto {
			r.StreamBytes, r.StreamTime, r.StreamConnect = int64(upto-restart), time.Since(start), d.connect
			return
		}
	}
	r.StreamNotMeasured = "streaming the window's WAL through a walsender: " + err.Error()
}

// closeStream closes the replication connection and waits (2 s at most)
// until its walsender has ended and its temporary slot has gone with it, so
// that the probe leaves no slot behind when it returns.
func (d *decodeProbe) closeStream(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	d.repl.Close(ctx)
	for range 40 {
		var n int64
		if err := d.conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, d.slot+"_w").Scan(&n); err != nil || n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamProbeWait bounds the walsender's streaming of the window.
const streamProbeWait = 30 * time.Second

// finish decodes the slot's WAL up to the WAL's end now, times it, and
// drops the slot.
func (d *decodeProbe) finish(ctx context.Context) *DecodeReading {
	if d.conn == nil {
		return &DecodeReading{NotMeasured: d.reason}
	}
	if d.repl == nil && d.replReason == "" {
		d.replReason = "not started"
	}
	r := &DecodeReading{}
	var upto string
	err := d.conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), restart_lsn)::bigint, pg_current_wal_insert_lsn()::text
		FROM pg_replication_slots WHERE slot_name = $1`, d.slot).Scan(&r.Bytes, &upto)
	if err == nil {
		start := time.Now()
		err = d.conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE data NOT LIKE 'BEGIN%' AND data NOT LIKE 'COMMIT%')
			FROM pg_logical_slot_peek_changes($1, $2::pg_lsn, NULL, 'skip-empty-xacts', '1')`, d.slot, upto).Scan(&r.Changes)
		r.Time = time.Since(start)
	}
	if err == nil {
		lsn, perr := pglogrepl.ParseLSN(upto)
		if perr != nil {
			err = perr
		} else if d.repl != nil {
			d.streamTo(ctx, lsn, r)
		} else {
			r.StreamNotMeasured = d.replReason
		}
	} else if d.repl != nil {
		d.closeStream(ctx)
	}
	if _, derr := d.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, d.slot); derr != nil {
		discard(ctx, d.conn) // a temporary slot ends with its session
	} else {
		d.conn.Release()
	}
	if err != nil {
		return &DecodeReading{NotMeasured: "decoding the window's WAL: " + err.Error()}
	}
	return r
}

// discard closes a pooled connection instead of returning it to the pool.
func discard(ctx context.Context, conn *pgxpool.Conn) {
	_ = conn.Conn().Close(ctx)
	conn.Release()
}

// CleanupBatchRows is the cleanup's batch (cleanup.Options.BatchRows'
// default, backfill.DeleteRanges'), which the cleanup's probes take.
const CleanupBatchRows = 5000

// imageProbeBytes is the WAL timeImages writes: more than wal_buffers holds
// at most (16 MB by default), so the backend writes some of it out itself
// as a cleanup's does.
const imageProbeBytes = 32 << 20

// timeImages times the source writing WAL records the size of a full-page
// image (pageSize bytes each, n·pageSize ≥ bytes in all), the WAL a
// cleanup's deletes write most of (cleanupWAL): transactional logical
// messages in a transaction rolled back, which no decoder passes on (a
// rolled-back transaction's changes are dropped), then a commit of an
// empty transaction with an xid (txid_current), which flushes them as a
// cleanup's batch commit flushes its images. It locks nothing. It returns
// the bytes and the time, or why they were not measured.
func timeImages(ctx context.Context, pool *pgxpool.Pool, bytes int64) (int64, time.Duration, string) {
	n := (bytes + pageSize - 1) / pageSize
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, 0, "no connection: " + err.Error()
	}
	defer conn.Release()
	start := time.Now()
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, `SELECT count(pg_logical_emit_message(true, 'reshard_capacity_probe', repeat('x', $1::int))) FROM generate_series(1, $2::int)`, pageSize, n)
		if rerr := tx.Rollback(ctx); err == nil {
			err = rerr
		}
	}
	if err == nil {
		_, err = conn.Exec(ctx, `SELECT txid_current()`)
	}
	if err != nil {
		return 0, 0, "writing page-sized WAL records (pg_logical_emit_message, rolled back): " + err.Error()
	}
	return n * pageSize, time.Since(start), ""
}
