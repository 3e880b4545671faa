package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cleanup"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/verify"
)

// cores is how this section counts a core: one of the machine's CPUs as
// nproc counts them (2 here), whatever share of them the run got.
func cores() float64 { return float64(runtime.NumCPU()) }

// Spirit's published figures (cashapp/spirit): a 1.43 TiB table copied at
// about 247 GiB/h and checksummed at about 2,200 GiB/h on 32 vCPUs.
const (
	spiritVCPUs      = 32
	spiritCopyGiBh   = 247.0
	spiritVerifyGiBh = 2200.0
)

// orders is the section's table as the ledger writers see it.
var ordersLedger = ledger.Table{Name: "orders", Key: "id", Val: "email"}

// largeRun is one run of section large: its servers, pools and the
// measurements taken along the move.
type largeRun struct {
	e       *env
	r       *report
	rows    int64 // loaded
	ctl     *pgxpool.Pool
	store   *topology.Store
	set     tableset.Set
	old     *ring.Ring
	writers *largeWriters
	// probeEnd is the source's counters as its probe's WAL window ended
	// (the slot-WAL diagnostics).
	probeEnd sourceCounters
}

// runLarge is section large: a source shard of -large-gb of table data
// (rows of orders, ordersDDL) gives a fifth of its token space to a new
// shard, under writers through the router for the whole move: the move one
// source makes when a fifth shard joins four. It times each phase (copy,
// catch-up, verify, cutover, cleanup, then a VACUUM), counts the WAL each
// server writes and the CPU each process spends, holds the capacity
// model's predictions (at the start, and again at 10 % of the copy) against
// what happened, and checks the writers' ledger at the end. The servers'
// data directories are removed when it ends, failed or not (-keep keeps
// them).
func runLarge(ctx context.Context, _ *env, r *report) error {
	cfg := r.cfg
	want := int64(cfg.largeGB * 1e9)
	pg, err := devenv.NewPG()
	if err != nil {
		return err
	}
	lr := &largeRun{r: r}
	e, err := lr.servers(ctx, pg, want)
	if e != nil {
		defer e.close() // kills both servers and removes dir (unless -keep)
	}
	if err != nil {
		return err
	}
	dir := e.dir
	if e.srcPool, err = pgxpool.New(ctx, e.src.DSN("postgres", false)); err != nil {
		return err
	}
	if e.dstPool, err = pgxpool.New(ctx, e.dst.DSN("postgres", false)); err != nil {
		return err
	}
	if err := e.srcPool.QueryRow(ctx, `SELECT pg_table_size('orders')`).Scan(&e.tableBytes); err != nil {
		return err
	}
	var idx int64
	if err := e.srcPool.QueryRow(ctx, `SELECT pg_indexes_size('orders')`).Scan(&idx); err != nil {
		return err
	}
	if cfg.largeReuse != "" {
		if err := lr.reset(ctx); err != nil {
			return err
		}
	}
	r.add("large_table_data_gib", float64(e.tableBytes)/(1<<30), "GiB", fmt.Sprintf("orders on the source: %d rows, pg_table_size (heap and TOAST; 1 row in %d has a 3 KiB TOASTed note), indexes %s more (primary key and two secondary); disk free after the load %s; %s",
		lr.rows, largeToastEvery, gib(idx), diskFree(dir), hugePages()))
	for _, q := range []string{ordersDDL + ` WITH (autovacuum_enabled = false)`, ordersIndexes[0], ordersIndexes[1], ordersIndexes[2], `CREATE EXTENSION pg_stat_statements`} {
		if _, err := e.dstPool.Exec(ctx, q); err != nil {
			return fmt.Errorf("target: %s: %w", q, err)
		}
	}
	if _, err := e.srcPool.Exec(ctx, `CREATE EXTENSION pg_stat_statements`); err != nil {
		return err
	}
	if err := lr.control(ctx); err != nil {
		return err
	}
	defer lr.ctl.Close()
	if lr.set, err = tableset.Introspect(ctx, e.dstPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "orders", KeyColumn: "id"}}}, "target"); err != nil {
		return err
	}
	rt, stopRouter, err := lr.router(ctx)
	if err != nil {
		return err
	}
	defer stopRouter()
	lr.writers = startLargeWriters(ctx, rt, lr.rows, cfg.largeWriters, cfg.largeWriteRate)
	defer lr.writers.stop()
	// The pause rounds measure after 3 s of writes; the capacity probe
	// waits for the writers to be steady (warmUp).
	time.Sleep(3 * time.Second)
	if cfg.largeMove {
		if err := lr.pauses(ctx); err != nil {
			return err
		}
		if err := lr.move(ctx); err != nil {
			return err
		}
	}
	lr.writers.stop()
	if err := lr.writers.check(ctx, lr.r, map[string]*pgxpool.Pool{"source": e.srcPool, "target": e.dstPool}, lr.owner); err != nil {
		return err
	}
	if cfg.largeGated {
		return lr.gated(ctx)
	}
	return nil
}

// servers starts the servers and loads orders, or, with -large-reuse,
// takes up the servers a killed run left in that directory.
func (lr *largeRun) servers(ctx context.Context, pg *devenv.PG, want int64) (*env, error) {
	cfg, r := lr.r.cfg, lr.r
	if cfg.largeReuse != "" {
		e := &env{cfg: cfg, out: r.out, pg: pg, dir: cfg.largeReuse}
		lr.e = e
		for _, s := range []*devenv.Server{&e.src, &e.dst} {
			name := map[*devenv.Server]string{&e.src: "source", &e.dst: "target"}[s]
			*s = devenv.Server{Name: name, DataDir: filepath.Join(cfg.largeReuse, name, "data")}
			b, err := os.ReadFile(filepath.Join(s.DataDir, "postmaster.pid"))
			if err != nil {
				return e, fmt.Errorf("-large-reuse: %s is not running: %w", name, err)
			}
			lines := strings.Split(string(b), "\n")
			if len(lines) < 4 {
				return e, fmt.Errorf("-large-reuse: %s: short postmaster.pid", name)
			}
			if s.Port, err = strconv.Atoi(strings.TrimSpace(lines[3])); err != nil {
				return e, err
			}
		}
		fmt.Fprintf(r.out, "servers (reused): source :%d, target :%d (%s); disk free %s\n", e.src.Port, e.dst.Port, e.dir, diskFree(e.dir))
		return e, nil
	}
	dir, err := os.MkdirTemp("", "reshard-bench-large-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, out: r.out, pg: pg, dir: dir}
	lr.e = e
	// Source: the table, its indexes and up to max_wal_size of WAL; target:
	// a fifth of it; 10 GB to spare for the WAL the move retains and others.
	need := want*13/10 + want/4 + 10e9
	if free, err := freeBytes(dir); err != nil {
		return e, err
	} else if free < need {
		return e, fmt.Errorf("section large: %s has %.1f GB free, and a run of -large-gb %.1f needs about %.1f GB: free space or lower -large-gb",
			dir, float64(free)/1e9, cfg.largeGB, float64(need)/1e9)
	}
	if e.src, e.dst, err = largeServers(ctx, pg, dir); err != nil {
		return e, err
	}
	fmt.Fprintf(r.out, "servers: source :%d, target :%d (%s); disk free %s\n", e.src.Port, e.dst.Port, dir, diskFree(dir))
	if lr.rows, err = loadOrders(ctx, pg, e.src, want, func(f string, a ...any) { fmt.Fprintf(r.out, f+"\n", a...) }); err != nil {
		return e, err
	}
	return e, nil
}

// reset undoes what a killed run left on reused servers: the control
// database, the streams, reshard's schemas (the fences with them), the
// target's rows.
func (lr *largeRun) reset(ctx context.Context) error {
	e := lr.e
	for _, q := range []string{
		`DROP DATABASE IF EXISTS reshard_ctl WITH (FORCE)`,
		`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`,
		`DO $$DECLARE p text; BEGIN FOR p IN SELECT pubname FROM pg_publication LOOP EXECUTE format('DROP PUBLICATION %I', p); END LOOP; END$$`,
		`DROP SCHEMA IF EXISTS reshard CASCADE`,
		`DROP EXTENSION IF EXISTS pg_stat_statements`,
	} {
		if _, err := e.srcPool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset the source: %s: %w", q, err)
		}
	}
	for _, q := range []string{
		`SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin`,
		`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots`,
		`DROP SCHEMA IF EXISTS reshard CASCADE`,
		`DROP TABLE IF EXISTS orders`,
		`DROP EXTENSION IF EXISTS pg_stat_statements`,
	} {
		if _, err := e.dstPool.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset the target: %s: %w", q, err)
		}
	}
	return e.srcPool.QueryRow(ctx, `SELECT max(id) FROM orders`).Scan(&lr.rows)
}

// control creates the control database on the source, registers both
// shards and publishes the ring where the source owns every token.
func (lr *largeRun) control(ctx context.Context) error {
	e := lr.e
	if _, err := e.srcPool.Exec(ctx, "CREATE DATABASE reshard_ctl"); err != nil {
		return err
	}
	ctl, err := pgxpool.New(ctx, e.src.DSN("reshard_ctl", false))
	if err != nil {
		return err
	}
	lr.ctl = ctl
	if err := topology.Migrate(ctx, ctl); err != nil {
		return err
	}
	lr.store = topology.NewStore(ctl)
	for _, s := range []devenv.Server{e.src, e.dst} {
		ref := topology.ConnRef{Host: "127.0.0.1", Port: uint16(s.Port), Database: "postgres", User: "postgres"}
		if err := lr.store.RegisterShard(ctx, topology.Shard{Name: s.Name, Conn: ref, State: topology.ShardActive}); err != nil {
			return err
		}
	}
	lr.old = ring.MustNew([]ring.VNode{{Token: 0, Shard: "source"}})
	v1, err := topology.New(lr.old, nil, "initial")
	if err != nil {
		return err
	}
	_, err = lr.store.Publish(ctx, 0, v1)
	return err
}

// router starts a router on pools of its own (the application's).
func (lr *largeRun) router(ctx context.Context) (*router.Router, func(), error) {
	pools := map[string]*pgxpool.Pool{}
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
	}
	for _, s := range []devenv.Server{lr.e.src, lr.e.dst} {
		p, err := pgxpool.New(ctx, s.DSN("postgres", false))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		pools[s.Name] = p
	}
	rt, err := router.New(ctx, lr.store, pools, router.Options{PollInterval: -1, FenceRetries: 12})
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { rt.Run(rctx); close(done) }()
	return rt, func() { stop(); <-done; closeAll() }, nil
}

// owner is who owns key k once the move has ended (the source, when
// -large-move=false made none).
func (lr *largeRun) owner(k int64) string {
	if lr.e.cfg.largeMove && largeRange().Contains(ring.TokenInt64(k)) {
		return "target"
	}
	return "source"
}

// largeRange is the fifth of the token space that moves.
func largeRange() ring.Range {
	return ring.Range{Lo: ring.MinToken, Hi: ring.MinToken + 2*(ring.MaxToken/5)}
}

// pauses measures the write pause of -large-pause-rounds cutovers of a
// small range (0.01 % of the token space) of the loaded table and their
// rollbacks, under the same writers: the pause of a cutover does not grow
// with the rows moved, and one move gives one sample only.
func (lr *largeRun) pauses(ctx context.Context) error {
	rg := ring.Range{Lo: 1e18, Hi: 1e18 + ring.MaxToken/10000*2}
	next, moves, err := ring.PlanMove(lr.old, rg, "target")
	if err != nil {
		return err
	}
	m := cutover.Move{From: "source", To: "target", Source: lr.e.srcPool, Target: lr.e.dstPool, Set: lr.set, Ranges: []ring.Range{moves[0].Range}}
	srcRepl := lr.e.src.DSN("postgres", false) + "&replication=database"
	dstRepl := lr.e.dst.DSN("postgres", false) + "&replication=database"
	if lr.e.cfg.largePauseRounds == 0 {
		return nil
	}
	// A range this small is copied in token order, through the token
	// index: without it each round's copy pages by primary key and reads
	// the whole table for a few thousand rows (over 4 minutes a chunk at
	// load 40 on 20 GB), as a move of a small range would.
	start := time.Now()
	if err := tableset.CreateTokenIndex(ctx, lr.e.srcPool, lr.set.Tables[0]); err != nil {
		return err
	}
	fmt.Fprintf(lr.r.out, "token index of orders built in %s for the pause rounds\n", time.Since(start).Round(time.Second))
	defer func() {
		_, _ = lr.e.srcPool.Exec(context.WithoutCancel(ctx), "DROP INDEX IF EXISTS "+pgx.Identifier{lr.set.Tables[0].Schema, tableset.TokenIndexName(lr.set.Tables[0])}.Sanitize())
	}()
	var pauses []time.Duration
	for round := range lr.e.cfg.largePauseRounds {
		m.ID = fmt.Sprintf("largepause%d", round)
		fwd, rev, err := roundTrip(ctx, lr.store, lr.ctl, m, lr.old, next, srcRepl, dstRepl, lr.e)
		if err != nil {
			return fmt.Errorf("pause round %d: %w", round, err)
		}
		pauses = append(pauses, fwd.WritePause, rev.WritePause)
		fmt.Fprintf(lr.r.out, "pause round %d: forward %s (%s), back %s (%s)\n", round, fwd.WritePause.Round(time.Millisecond), stepsString(fwd),
			rev.WritePause.Round(time.Millisecond), stepsString(rev))
	}
	if len(pauses) == 0 {
		return nil
	}
	slices.Sort(pauses)
	q := func(p float64) float64 {
		return float64(pauses[min(len(pauses)-1, int(p*float64(len(pauses))))].Microseconds()) / 1000
	}
	details := fmt.Sprintf("%d cutovers (%d forward, %d back by rollback) of 0.01%% of the token space of the loaded orders, under the move's router writers", len(pauses), len(pauses)/2, len(pauses)/2)
	lr.r.add("large cutover write pause p50", q(0.5), "ms", details)
	lr.r.add("large cutover write pause p99", q(0.99), "ms", details+fmt.Sprintf("; with %d samples p99 is their max", len(pauses)))
	return nil
}

// phase is what one phase cost: its time, the WAL each server wrote and
// the CPU each server's processes and this process spent.
type phase struct {
	took                   time.Duration
	srcWAL, dstWAL         int64
	srcCPU, dstCPU, ownCPU time.Duration
	machine                machineCounters // the whole machine's, over the phase
}

// cpuSeconds is the phase's CPU in all.
func (p phase) cpuSeconds() float64 { return (p.srcCPU + p.dstCPU + p.ownCPU).Seconds() }

// meter starts measuring a phase; its func ends it.
func (lr *largeRun) meter(ctx context.Context) (func() (phase, error), error) {
	e := lr.e
	lsn := func(p *pgxpool.Pool) (int64, error) {
		var n int64
		err := p.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`).Scan(&n)
		return n, err
	}
	s0, err := lsn(e.srcPool)
	if err != nil {
		return nil, err
	}
	d0, err := lsn(e.dstPool)
	if err != nil {
		return nil, err
	}
	sc0, err := treeCPU(e.src)
	if err != nil {
		return nil, err
	}
	dc0, err := treeCPU(e.dst)
	if err != nil {
		return nil, err
	}
	oc0 := ownCPU()
	m0 := readMachine()
	start := time.Now()
	return func() (phase, error) {
		p := phase{took: time.Since(start), ownCPU: ownCPU() - oc0, machine: readMachine().minus(m0)}
		s1, err := lsn(e.srcPool)
		if err != nil {
			return p, err
		}
		d1, err := lsn(e.dstPool)
		if err != nil {
			return p, err
		}
		sc1, err := treeCPU(e.src)
		if err != nil {
			return p, err
		}
		dc1, err := treeCPU(e.dst)
		if err != nil {
			return p, err
		}
		p.srcWAL, p.dstWAL, p.srcCPU, p.dstCPU = s1-s0, d1-d0, sc1-sc0, dc1-dc0
		return p, nil
	}, nil
}

// ownCPU is the CPU this process has spent (user and system).
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// predict probes the move and predicts it as PLAN does (capacity.Assess's
// steps, kept apart here so that the model's input can be predicted again
// with the copy's own first tenth in place of the probe).
func (lr *largeRun) predict(ctx context.Context, ranges []ring.Range) (capacity.Move, map[string]capacity.ShardProbe, error) {
	e := lr.e
	srcSet, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "orders", KeyColumn: "id"}}}, "source")
	if err != nil {
		return capacity.Move{}, nil, err
	}
	t := srcSet.Tables[0]
	ests, err := tableset.EstimateRanges(ctx, e.srcPool, t, ranges)
	if err != nil {
		return capacity.Move{}, nil, err
	}
	m := capacity.Move{ID: "large", Source: "source", Target: "target", Tables: 1}
	for _, es := range ests {
		m.Rows += es.Rows
		m.Bytes += es.Bytes
	}
	size, idx, err := capacity.TableSizes(ctx, e.srcPool, t)
	if err != nil {
		return m, nil, err
	}
	m.SetBytes = size
	m.IndexBytes = int64(float64(m.Bytes) * float64(idx) / float64(size))
	shards := map[string]capacity.ShardProbe{}
	for _, s := range []struct {
		name   string
		pool   *pgxpool.Pool
		tables []tableset.Table
	}{{"source", e.srcPool, []tableset.Table{t}}, {"target", e.dstPool, nil}} {
		var c0 sourceCounters
		if s.name == "source" {
			printServerSettings(ctx, lr.r.out, s.pool)
			if c0, err = readSourceCounters(ctx, s.pool, lr.writers.st.Acked.Load()); err != nil {
				return m, nil, err
			}
		}
		p, err := capacity.ProbeShard(ctx, s.name, s.pool, lr.e.cfg.largeWALWindow, s.tables...)
		if err != nil {
			return m, nil, err
		}
		shards[s.name] = p
		if s.name == "source" {
			if lr.probeEnd, err = readSourceCounters(ctx, s.pool, lr.writers.st.Acked.Load()); err != nil {
				return m, nil, err
			}
			printSpan(lr.r.out, "probe (ProbeShard on the source: its WAL window, and its decoding's slot made before and decoded after it)", c0, lr.probeEnd, p.WAL.FPIBytes())
			var changes int64
			for _, tc := range p.Tables {
				changes += tc.Changes()
			}
			fmt.Fprintf(lr.r.out, "diag probe's window alone: %s; orders %d row changes (%.0f/s); pg_stat_wal %d records, %d images, %s\n",
				p.WAL.Window.Round(time.Millisecond), changes, float64(changes)/p.WAL.Window.Seconds(), p.WAL.Records, p.WAL.FPI, capacity.HumanBytes(p.WAL.StatBytes))
			printReading(lr.r.out, "probe", p.WAL)
		}
	}
	m.Changes.AddTable(shards["source"], t.String(), m.Bytes, size)
	mix := capacity.TableChanges{Inserts: m.Changes.Inserts, Updates: m.Changes.Updates, Deletes: m.Changes.Deletes}
	if m.Probe, err = capacity.ProbeMove(ctx, e.srcPool, e.dstPool, t, ranges, float64(m.Bytes)/float64(m.Rows), capacity.ProbeOptions{Changes: mix}); err != nil {
		return m, nil, err
	}
	return m, shards, nil
}

// tenth is the copy as it stood when a tenth of its estimated rows had
// been copied: the source's WAL over it (by the WAL position, and as
// the probe reads its window) and the slot's retained WAL then.
type tenth struct {
	at                     time.Duration
	rows, srcWAL, retained int64
	wal                    capacity.WALReading
}

// move makes the fifth's move and reports its figures.
func (lr *largeRun) move(ctx context.Context) error {
	e, r := lr.e, lr.r
	next, moves, err := ring.PlanMove(lr.old, largeRange(), "target")
	if err != nil {
		return err
	}
	m := cutover.Move{ID: "large", From: "source", To: "target", Source: e.srcPool, Target: e.dstPool, Set: lr.set, Ranges: []ring.Range{moves[0].Range}}
	if err := lr.warmUp(ctx); err != nil {
		return err
	}
	if e.cfg.largeCheckpoint {
		if _, err := e.srcPool.Exec(ctx, `CHECKPOINT`); err != nil {
			return fmt.Errorf("CHECKPOINT on the source before the probe: %w", err)
		}
		fmt.Fprintf(r.out, "-large-checkpoint: CHECKPOINT on the source at %s, just before the probe\n", time.Now().UTC().Format("15:04:05"))
	}
	cm, shards, err := lr.predict(ctx, m.Ranges)
	if err != nil {
		return err
	}
	atStart := capacity.Predict([]capacity.Move{cm}, shards, nil, capacity.Options{})
	pm := atStart.Moves[0]
	w := shards["source"].WAL
	fmt.Fprintf(r.out, "predicted at the start: %d rows, %s; copy %s (%s/s), catch-up %s, verify %s, cleanup %s; slot WAL %s (source WAL %s/s; its window %s/s, %.0f %% full-page images, %s after a checkpoint); %s\n",
		cm.Rows, gib(cm.Bytes), pm.Copy.Duration().Round(time.Second), capacity.HumanBytes(int64(pm.CopyBytesPerSec)), pm.CatchUp.Duration().Round(time.Second),
		pm.Verify.Duration().Round(time.Second), pm.Cleanup.Duration().Round(time.Second), capacity.HumanBytes(pm.SlotWAL),
		capacity.HumanBytes(int64(shards["source"].WALBytesPerSec)), capacity.HumanBytes(int64(w.RawRate())), 100*w.FPIShare(), w.SinceCheckpoint.Round(time.Second), pm.Basis)
	var fpi []int64
	for _, p := range w.Parts {
		fpi = append(fpi, p.FPI)
	}
	fmt.Fprintf(r.out, "the source's full-page images a second over the WAL window: %v\n", fpi)
	fmt.Fprintf(r.out, "diag slot WAL at the start by the rule before (the source's rate over a checkpoint cycle × the copy): %s; by the copy's own span of the cycle (%s after the window, the move's probe's end): %s\n",
		capacity.HumanBytes(int64(shards["source"].WALBytesPerSec*pm.Copy.Duration().Seconds())), cm.Probe.Done.Sub(w.End).Round(time.Second), capacity.HumanBytes(pm.SlotWAL))

	// JOINING: the fences' guards, the publication, the slot.
	if _, err := topology.Begin(next, m.Ranges, m.From, m.To, "begin large").Publish(ctx, lr.store); err != nil {
		return err
	}
	fc := fence.Control{Pool: lr.ctl, Store: lr.store}
	if err := cleanup.ReconcileBoth(ctx, m, fc); err != nil {
		return err
	}
	names, l0, err := e.cdcJoinAt(ctx, m.ID, m.Set, m.Ranges)
	if err != nil {
		return err
	}
	srcRepl := e.src.DSN("postgres", false) + "&replication=database"
	dstRepl := e.dst.DSN("postgres", false) + "&replication=database"
	for _, p := range []*pgxpool.Pool{e.srcPool, e.dstPool} {
		if _, err := p.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
			return err
		}
	}
	stopProfile, err := startProfile(e.cfg.largeProfile)
	if err != nil {
		return err
	}
	defer stopProfile()

	// SNAPSHOT_COPY.
	sample := sampleSlot(ctx, e.srcPool, names.Slot, nil)
	copy0, err := readSourceCounters(ctx, e.srcPool, lr.writers.st.Acked.Load())
	if err != nil {
		return err
	}
	printSpan(r.out, "from the probe's window to the copy (the move's probe, JOINING)", lr.probeEnd, copy0, w.FPIBytes())
	if sl, err := backfill.ReadSlot(ctx, e.srcPool, names.Slot, 0); err == nil {
		fmt.Fprintf(r.out, "diag the copy starts %s after the probe's window ended, %s after the last checkpoint began; the slot retains %s\n",
			copy0.at.Sub(lr.probeEnd.at).Round(time.Second), copy0.at.Sub(copy0.ckptTime).Round(time.Second), capacity.HumanBytes(sl.Retained))
	}
	watch, err := startCopyWatch(ctx, e.srcPool, lr.writers.st.Acked.Load)
	if err != nil {
		return err
	}
	end, err := lr.meter(ctx)
	if err != nil {
		return err
	}
	var (
		tenthMu sync.Mutex
		ten     *tenth
		started = time.Now()
		srcWAL0 int64
	)
	if err := e.srcPool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`).Scan(&srcWAL0); err != nil {
		return err
	}
	// The source's WAL over the first tenth as the probe reads its
	// window, a part a second, for the slot's WAL at 10 % (SlotWALAt).
	meter, err := capacity.StartWALMeter(ctx, e.srcPool)
	if err != nil {
		return err
	}
	stopMeter := every(ctx, time.Second, func(ctx context.Context) {
		tenthMu.Lock()
		defer tenthMu.Unlock()
		if ten == nil {
			_ = meter.Sample(ctx) // a part missed joins the next
		}
	})
	defer stopMeter()
	progress := func(p backfill.Progress) {
		tenthMu.Lock()
		defer tenthMu.Unlock()
		if ten != nil || p.Rows*10 < cm.Rows {
			return
		}
		t := &tenth{at: time.Since(started), rows: p.Rows}
		var w int64
		if err := e.srcPool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`).Scan(&w); err == nil {
			t.srcWAL = w - srcWAL0
		}
		if sl, err := backfill.ReadSlot(ctx, e.srcPool, names.Slot, 0); err == nil {
			t.retained = sl.Retained
		}
		t.wal, _ = meter.Reading(ctx) // unread: the start's reading is taken
		ten = t
		var fpi []int64
		for _, p := range t.wal.Parts {
			fpi = append(fpi, p.FPI)
		}
		taken := "its own"
		if !t.wal.Followable() {
			taken = "the start's: too few parts to follow its images"
		}
		fmt.Fprintf(r.out, "a tenth copied: %d rows in %s; the slot retains %s; the source's WAL over it %s/s (%s/s over the cycle, %.0f %% full-page images, %s after a checkpoint; images by part %v); the rate for the rest: %s\n",
			t.rows, t.at.Round(time.Second), capacity.HumanBytes(t.retained), capacity.HumanBytes(int64(t.wal.RawRate())), capacity.HumanBytes(int64(t.wal.SteadyRate())),
			100*t.wal.FPIShare(), t.wal.SinceCheckpoint.Round(time.Second), fpi, taken)
		printReading(r.out, "tenth", t.wal)
	}
	st, err := backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: m.ID, Set: lr.set, Source: "source", Target: "target", Ranges: m.Ranges,
		TableRows: map[string]int64{lr.set.Tables[0].String(): cm.Rows}, Progress: progress})
	stopMeter()
	copyWAL := watch.end(ctx, r.out)
	if err != nil {
		sample()
		return fmt.Errorf("copy: %w", err)
	}
	if copy1, err := readSourceCounters(ctx, e.srcPool, lr.writers.st.Acked.Load()); err == nil {
		printSpan(r.out, "copy", copy0, copy1, copyWAL.FPIBytes())
	}
	cp, err := end()
	if err != nil {
		return err
	}
	var moved, movedIdx int64
	if err := e.dstPool.QueryRow(ctx, `SELECT pg_table_size('orders'), pg_indexes_size('orders')`).Scan(&moved, &movedIdx); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "copied %d rows (%s of table data on the target) in %s\n", st.Rows, gib(moved), cp.took.Round(time.Second))
	stopProfile()
	if err := lr.topStatements(ctx, e.srcPool, "source, during the copy"); err != nil {
		return err
	}
	if err := lr.topStatements(ctx, e.dstPool, "target, during the copy"); err != nil {
		return err
	}

	// CDC_CATCH_UP: the stream starts after the copy, as the workflow's.
	fwdOpts := cdc.Options{Move: m.ID, SourceReplicationDSN: srcRepl, SourceDSN: e.src.DSN("postgres", false), TargetDSN: e.dst.DSN("postgres", false),
		Slot: names.Slot, Publication: names.Publication, Origin: names.Origin, StartLSN: l0, Set: lr.set, Ranges: m.Ranges}
	// The stream's own steps (connections, SQL peeks, the walsender's
	// start) timed from its start: where a catch-up's seconds go.
	cuStart := time.Now()
	fwdOpts.Logger = sinceLogger(r.out, "catch-up", cuStart)
	fwd, err := cdc.New(fwdOpts)
	if err != nil {
		sample()
		return err
	}
	fctx, stopFwd := context.WithCancel(ctx)
	fdone := make(chan error, 1)
	go func() { fdone <- fwd.Run(fctx) }()
	var (
		stopOnce sync.Once
		fwdErr   error
	)
	stopForward := func() error {
		stopOnce.Do(func() {
			stopFwd()
			if err := <-fdone; !errors.Is(err, context.Canceled) {
				fwdErr = fmt.Errorf("forward stream: %w", err)
			}
		})
		return fwdErr
	}
	defer stopForward()
	end, err = lr.meter(ctx)
	if err != nil {
		sample()
		return err
	}
	if err := cutover.EmitMarker(ctx, m.Source, "large-caught-up"); err != nil {
		sample()
		return err
	}
	fmt.Fprintf(r.out, "catch-up +%s: marker emitted\n", time.Since(cuStart).Round(time.Millisecond))
	if _, err := fwd.DrainToMarker(ctx, "large-caught-up"); err != nil {
		sample()
		return err
	}
	fmt.Fprintf(r.out, "catch-up +%s: drained to the marker\n", time.Since(cuStart).Round(time.Millisecond))
	cu, err := end()
	if err != nil {
		return err
	}
	peakWAL, _ := sample()

	// VERIFY, the stream held at the source snapshot's position.
	end, err = lr.meter(ctx)
	if err != nil {
		return err
	}
	rep, err := verify.Run(ctx, e.srcPool, e.dstPool, verify.Options{Set: lr.set, Source: "source", Target: "target", Ranges: m.Ranges, Holder: fwd})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if !rep.OK() {
		return fmt.Errorf("verify: %d rows differ", rep.Mismatches())
	}
	vf, err := end()
	if err != nil {
		return err
	}

	// CUTOVER.
	if _, _, err := join.Reverse(ctx, m, dstRepl); err != nil {
		return err
	}
	pgc := cutover.NewPG(m, fwd, fc, topology.CutOver(next, m.Ranges, m.From, m.To, "cutover large"), cutover.PGJournal{Pool: lr.ctl, Move: m.ID})
	res, err := cutover.Run(ctx, pgc, cutover.PGJournal{Pool: lr.ctl, Move: m.ID}, cutover.Options{})
	if err != nil {
		return fmt.Errorf("cutover: %w", err)
	}
	if err := stopForward(); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "cutover: write pause %s (%s)\n", res.WritePause.Round(time.Millisecond), stepsString(res))

	// CLEANUP: the moved rows deleted on the source, then a VACUUM.
	if _, err := e.srcPool.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		return err
	}
	end, err = lr.meter(ctx)
	if err != nil {
		return err
	}
	cl, err := cleanup.Run(ctx, m, cleanup.Options{Fences: fc, Target: next, VerifyRunIDs: nil, Logger: sinceLogger(r.out, "cleanup", time.Now())})
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	cc, err := end()
	if err != nil {
		return err
	}
	if err := lr.topStatements(ctx, e.srcPool, "source, during the cleanup"); err != nil {
		return err
	}
	dead0, size0, err := deadTuples(ctx, e.srcPool)
	if err != nil {
		return err
	}
	end, err = lr.meter(ctx)
	if err != nil {
		return err
	}
	if _, err := e.srcPool.Exec(ctx, `VACUUM orders`); err != nil {
		return err
	}
	vc, err := end()
	if err != nil {
		return err
	}
	dead1, size1, err := deadTuples(ctx, e.srcPool)
	if err != nil {
		return err
	}

	// The model again, with the copy's first tenth for the probe's sample
	// and for the slot's WAL what it retained at the tenth plus the rest
	// of the copy at the source's rate over a checkpoint cycle, read over
	// the tenth as the probe reads its window (capacity.SlotWALAt; the raw
	// rate of the tenth, the rule before, took the images after the
	// slot's creation for the whole copy's: +77 % and +152 % at 20 GB).
	var atTenth capacity.MovePrediction
	if ten != nil && ten.at > 0 {
		c := cm.Measured(ten.rows, ten.at)
		sh := maps2(shards)
		sp := sh["source"]
		slotWAL := capacity.SlotWALAt(ten.retained, ten.wal, sp.WAL, ten.rows, cm.Rows, ten.at)
		if ten.wal.Followable() {
			rest := ten.at.Seconds() * float64(cm.Rows-ten.rows) / float64(ten.rows)
			fmt.Fprintf(r.out, "diag slot WAL at 10 %% by the rule before (retained + the tenth's rate over a checkpoint cycle × the rest): %s; by the rest's own span of the cycle: %s\n",
				capacity.HumanBytes(ten.retained+int64(ten.wal.SteadyRate()*rest)), capacity.HumanBytes(slotWAL))
		}
		if rest := c.Probe.CopyTime.Seconds() * float64(cm.Rows-ten.rows) / float64(ten.rows); rest > 0 {
			sp.WALBytesPerSec = float64(slotWAL-ten.retained) / rest // the rate SlotWALAt took
		}
		sh["source"] = sp
		atTenth = capacity.Predict([]capacity.Move{c}, sh, nil, capacity.Options{}).Moves[0]
		atTenth.SlotWAL = slotWAL
	}
	lr.report(largeFigures{cm: cm, start: pm, tenth: atTenth, haveTenth: ten != nil, copyStats: st, moved: moved, movedIdx: movedIdx,
		copy: cp, catchUp: cu, verify: vf, verified: rep.Rows, cleanup: cc, deleted: cl.Deleted, vacuum: vc, peakWAL: peakWAL,
		pause: res.WritePause, dead0: dead0, size0: size0, dead1: dead1, size1: size1})
	return nil
}

// maps2 copies a map of shard probes.
func maps2(m map[string]capacity.ShardProbe) map[string]capacity.ShardProbe {
	c := make(map[string]capacity.ShardProbe, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// deadTuples is orders' dead tuples (pg_stat_user_tables, once the
// statistics of the sessions that deleted are flushed) and its
// pg_table_size.
func deadTuples(ctx context.Context, pool *pgxpool.Pool) (dead, size int64, err error) {
	time.Sleep(2 * time.Second) // sessions flush their counts at most every second
	err = pool.QueryRow(ctx, `SELECT n_dead_tup, pg_table_size('orders') FROM pg_stat_user_tables WHERE relname = 'orders'`).Scan(&dead, &size)
	return dead, size, err
}

// topStatements prints the statements that took the most time on a server
// since pg_stat_statements was last reset, grouped by their first 100
// characters (each chunk's statement has its own text): where a phase's
// server time went.
func (lr *largeRun) topStatements(ctx context.Context, pool *pgxpool.Pool, what string) error {
	rows, err := pool.Query(ctx, `SELECT sum(calls)::bigint, round(sum(total_exec_time))::bigint, sum(rows)::bigint, q
		FROM (SELECT calls, total_exec_time, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 100) AS q FROM pg_stat_statements) s
		GROUP BY q ORDER BY 2 DESC LIMIT 5`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(lr.r.out, "pg_stat_statements on the %s (calls, total ms, rows, query):\n", what)
	for rows.Next() {
		var calls, ms, n int64
		var q string
		if err := rows.Scan(&calls, &ms, &n, &q); err != nil {
			return err
		}
		fmt.Fprintf(lr.r.out, "  %d  %d ms  %d rows  %s\n", calls, ms, n, q)
	}
	return rows.Err()
}

// largeWriters write through the router for the whole run: upserts of
// existing rows' email (a tenth of them new rows past the loaded ids),
// with the latency of every write kept for the pause the application sees.
// They write at a fixed rate (-large-write-rate), as an application's
// demand comes: with a pause after each write instead, a closed loop,
// they wrote 599 rows/s in the capacity probe's window and 516 under the
// copy at 20 GB, the copy taking their CPU on the shared cores, so the
// slot kept WAL of fewer writes than the probe saw (the run of 2026-12-04 02:37 UTC).
type largeWriters struct {
	l      *ledger.Ledger
	keys   []int64
	st     *ledger.Stats
	cancel context.CancelFunc
	once   sync.Once
	maxLat atomic.Int64 // ns
	how    string       // the rate, for the report
}

func startLargeWriters(ctx context.Context, rt *router.Router, rows int64, workers int, rate float64) *largeWriters {
	w := &largeWriters{l: ledger.New(), how: fmt.Sprintf("%d writers each pausing 5 ms after each write (a closed loop)", workers)}
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(workers) / rate * float64(time.Second))
		w.how = fmt.Sprintf("%d writers at %.0f writes/s in all, each starting a write every %s", workers, rate, interval)
	}
	rnd := rand.New(rand.NewPCG(34, 20))
	for len(w.keys) < 20000 {
		k := 1 + rnd.Int64N(rows)
		if len(w.keys)%10 == 9 {
			k = rows + 1 + int64(len(w.keys))
		}
		w.keys = append(w.keys, k)
	}
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	w.st = ledger.Write(wctx, rt, w.l, ledger.WriterOptions{Table: ordersLedger, Keys: w.keys, Workers: workers, Pause: 5 * time.Millisecond, Interval: interval, DeleteEvery: -1,
		OnWrite: func(_ int64, sent, done time.Time) {
			if d := int64(done.Sub(sent)); d > w.maxLat.Load() {
				w.maxLat.Store(d)
			}
		}})
	return w
}

func (w *largeWriters) stop() { w.once.Do(func() { w.cancel(); w.st.Wait() }) }

// check reads every key's row on its owner against the last acknowledged
// write.
func (w *largeWriters) check(ctx context.Context, r *report, pools map[string]*pgxpool.Pool, owner func(int64) string) error {
	bad, err := w.l.Check(ctx, ordersLedger, pools, owner)
	if err != nil {
		return err
	}
	r.add("large writes acknowledged", float64(w.st.Acked.Load()), "writes", fmt.Sprintf("through the router over the whole run (%s), %d failed; slowest write %s", w.how, w.st.Failed.Load(), time.Duration(w.maxLat.Load()).Round(time.Millisecond)))
	r.add("large ledger mismatches", float64(len(bad)), "keys", fmt.Sprintf("of %d keys checked on their owner after the move", len(w.keys)))
	if len(bad) > 0 {
		return fmt.Errorf("ledger: %d keys lost their last acknowledged write, first %s", len(bad), bad[0])
	}
	if n := w.st.Failed.Load(); n > 0 {
		return fmt.Errorf("%d writes failed, last: %v", n, *w.st.LastErr.Load())
	}
	return nil
}

// startProfile writes a CPU profile of this process to path (none when
// path is empty) until the returned stop.
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }, nil
}

// diskFree is the free space of dir's file system, for the log.
func diskFree(dir string) string {
	b, err := freeBytes(dir)
	if err != nil {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GB", float64(b)/1e9)
}

// hugePages says whether the servers' shared memory is in huge pages (the
// servers' huge_pages is PostgreSQL's default, try: they are used when the
// machine has them, vm.nr_hugepages). It matters here: with 4 KiB pages a
// new backend faults in each page of shared_buffers it touches, and on this
// VM that cost an index scan's first pass through a 1 GB shared_buffers
// about 7 CPU-s more than its second (9.7 s against 2.5 s; with huge pages
// 2.6 s and 2.5 s), so every fresh connection of the copy and the verify
// paid it (2026-12-04, a scratch server, psql's index scan of a 1.1 GB table).
func hugePages() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "huge pages unknown"
	}
	v := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.HasPrefix(f[0], "HugePages_") {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			v[strings.TrimSuffix(f[0], ":")] = n
		}
	}
	total := v["HugePages_Total"]
	if total == 0 {
		return "shared memory in 4 KiB pages (vm.nr_hugepages 0)"
	}
	return fmt.Sprintf("huge pages: vm.nr_hugepages %d, %d of them mapped by the servers' shared memory", total, total-v["HugePages_Free"]+v["HugePages_Rsvd"])
}

// largeFigures are what the move measured, for report.
type largeFigures struct {
	cm                             capacity.Move
	start, tenth                   capacity.MovePrediction
	haveTenth                      bool
	copyStats                      backfill.Stats
	moved, movedIdx                int64 // the target's orders after the copy: pg_table_size, pg_indexes_size
	copy, catchUp, verify, cleanup phase
	vacuum                         phase
	verified, deleted              int64
	peakWAL                        int64
	pause                          time.Duration
	dead0, size0, dead1, size1     int64
}

// report adds the move's figures.
func (lr *largeRun) report(f largeFigures) {
	r := lr.r
	g := float64(f.moved) / (1 << 30)
	n := cores()
	perHour := func(p phase) float64 { return g / p.took.Hours() }
	cpuNote := func(p phase) string {
		return fmt.Sprintf("%s; CPU %.0f s in all (source's processes %.0f s, target's %.0f s, this process %.0f s) of %.0f s × %.0f cores: %.1f GiB per CPU-hour spent; %s",
			p.took.Round(time.Second), p.cpuSeconds(), p.srcCPU.Seconds(), p.dstCPU.Seconds(), p.ownCPU.Seconds(), p.took.Seconds(), n, g/(p.cpuSeconds()/3600), p.machine)
	}
	r.add("large moved", g, "GiB", fmt.Sprintf("%d rows, the target's orders after the copy (pg_table_size: heap and TOAST), indexes %s more; a fifth of the token space of %s, the move of one source when a fifth shard joins four",
		f.copyStats.Rows, gib(f.movedIdx), gib(lr.e.tableBytes)))
	r.add("large copy", perHour(f.copy), "GiB/h", "backfill.Copy with the workflow's defaults (5,000-row chunks, one unit), unthrottled, under the router writers; "+cpuNote(f.copy))
	r.add("large copy per core", perHour(f.copy)/n, "GiB/h/core", fmt.Sprintf("a core is one of nproc's %.0f CPUs, the whole machine's time counted; goal ≥ 40; Spirit %.0f GiB/h on %d vCPUs: %.1f per vCPU", n, spiritCopyGiBh, spiritVCPUs, spiritCopyGiBh/spiritVCPUs))
	r.add("large verify", perHour(f.verify), "GiB/h", fmt.Sprintf("verify.Run (50,000-row chunks, 2 in parallel, both sides read) of %d rows, the stream held at the source snapshot's LSN; %s", f.verified, cpuNote(f.verify)))
	r.add("large verify per core", perHour(f.verify)/n, "GiB/h/core", fmt.Sprintf("goal ≥ 150; Spirit's checksum %.0f GiB/h on %d vCPUs: %.1f per vCPU", spiritVerifyGiBh, spiritVCPUs, spiritVerifyGiBh/spiritVCPUs))
	r.add("large cleanup", perHour(f.cleanup), "GiB/h", fmt.Sprintf("cleanup.Run: %d moved rows deleted on the source in 5,000-row batches, unthrottled; %s", f.deleted, cpuNote(f.cleanup)))
	r.add("large cleanup per core", perHour(f.cleanup)/n, "GiB/h/core", "GiB of moved table data deleted per hour, per core")
	r.add("large catch-up", f.catchUp.took.Seconds(), "s", fmt.Sprintf("the stream started after the copy drains the slot's %s of WAL to a marker; %s", capacity.HumanBytes(f.peakWAL), cpuNote(f.catchUp)))
	walPer := func(b int64) float64 { return float64(b) / (1 << 20) / g }
	r.add("large target WAL per GiB moved", walPer(f.copy.dstWAL+f.catchUp.dstWAL), "MiB/GiB", fmt.Sprintf("copy %s + catch-up %s: the rows, their TOAST and three indexes, full-page images", capacity.HumanBytes(f.copy.dstWAL), capacity.HumanBytes(f.catchUp.dstWAL)))
	r.add("large source WAL per GiB moved, copy to cutover", walPer(f.copy.srcWAL+f.catchUp.srcWAL+f.verify.srcWAL), "MiB/GiB", fmt.Sprintf("copy %s, catch-up %s, verify %s: the writers' WAL (the copy and verify write none)", capacity.HumanBytes(f.copy.srcWAL), capacity.HumanBytes(f.catchUp.srcWAL), capacity.HumanBytes(f.verify.srcWAL)))
	r.add("large source WAL per GiB moved, cleanup", walPer(f.cleanup.srcWAL), "MiB/GiB", fmt.Sprintf("%s during the cleanup (the writers' included); the model predicted %s (an upper bound: a full-page image per page)", capacity.HumanBytes(f.cleanup.srcWAL), capacity.HumanBytes(f.start.CleanupWAL)))
	r.add("large source WAL per GiB moved, VACUUM", walPer(f.vacuum.srcWAL), "MiB/GiB", fmt.Sprintf("%s in the VACUUM of orders after the cleanup, which took %s", capacity.HumanBytes(f.vacuum.srcWAL), f.vacuum.took.Round(time.Second)))
	r.add("large dead tuples after cleanup", float64(f.dead0), "tuples", fmt.Sprintf("pg_stat_user_tables.n_dead_tup of the source's orders (autovacuum off on it); table %s", gib(f.size0)))
	r.add("large dead tuples after VACUUM", float64(f.dead1), "tuples", fmt.Sprintf("table %s: VACUUM makes the space reusable but returns none, the deleted rows being spread over every page by their token", gib(f.size1)))
	r.add("large table size after cleanup", float64(f.size0)/(1<<30), "GiB", fmt.Sprintf("the source's orders, pg_table_size; %s before the move", gib(lr.e.tableBytes)))
	r.add("large table size after VACUUM", float64(f.size1)/(1<<30), "GiB", "the source's orders, pg_table_size")
	r.add("large move write pause", float64(f.pause.Microseconds())/1000, "ms", "the move's own cutover (one sample; the p50/p99 rows are small cutovers on the same table)")
	off := func(pred, actual float64) float64 { return 100 * (pred - actual) / actual }
	actual := f.copy.took + f.catchUp.took + f.verify.took
	model := func(name string, p capacity.MovePrediction, goalDur, goalWAL string) {
		r.add("large model "+name+": duration off by", off(p.Total().Seconds(), actual.Seconds()), "%", fmt.Sprintf("predicted %s (copy %s, catch-up %s, verify %s) against %s (copy %s, catch-up %s, verify %s); goal %s",
			p.Total().Round(time.Second), p.Copy.Duration().Round(time.Second), p.CatchUp.Duration().Round(time.Second), p.Verify.Duration().Round(time.Second),
			actual.Round(time.Second), f.copy.took.Round(time.Second), f.catchUp.took.Round(time.Second), f.verify.took.Round(time.Second), goalDur))
		bound := ""
		if p.DecodeBound {
			bound = ", the longer: decoding the slot's predicted WAL"
		}
		r.add("large model "+name+": catch-up off by", off(float64(p.CatchUp), f.catchUp.took.Seconds()), "%", fmt.Sprintf("predicted %s (%d row changes held, %.0f/s in the moving ranges, applied at %.0f/s; the source decoding %s/s of WAL%s) against %s",
			p.CatchUp.Duration().Round(time.Millisecond), p.HeldChanges, p.ChangesPerSec, p.ApplyChangesPerSec, capacity.HumanBytes(int64(p.DecodeBytesPerSec)), bound, f.catchUp.took.Round(time.Millisecond)))
		r.add("large model "+name+": peak slot WAL off by", off(float64(p.SlotWAL), float64(f.peakWAL)), "%", fmt.Sprintf("predicted %s against a peak of %s (sampled every second through the copy and the catch-up); goal %s",
			capacity.HumanBytes(p.SlotWAL), capacity.HumanBytes(f.peakWAL), goalWAL))
	}
	model("at start", f.start, "±30 %", "±25 %")
	if f.haveTenth {
		model("at 10 %", f.tenth, "±20 %", "±25 %")
	}
	r.add("large model at start: cleanup off by", off(float64(f.start.Cleanup), f.cleanup.took.Seconds()), "%", fmt.Sprintf("predicted %s against %s", f.start.Cleanup.Duration().Round(time.Second), f.cleanup.took.Round(time.Second)))
	r.add("large model at start: target growth off by", off(float64(f.start.TargetGrowth), float64(f.moved+f.movedIdx)), "%", fmt.Sprintf("predicted %s against %s (the target's orders with its indexes after the copy)",
		capacity.HumanBytes(f.start.TargetGrowth), capacity.HumanBytes(f.moved+f.movedIdx)))
	r.add("large model at start: basis", float64(f.cm.Rows), "rows estimated", fmt.Sprintf("%s; source WAL rate probed over %s", f.start.Basis, lr.e.cfg.largeWALWindow))
}

// gated measures the copy's throughput through the copy gate (its stream
// running beside it, backfill.Options.StreamDuringCopy) against without,
// at library level: a twentieth of the token space (a sixteenth of what
// the source keeps) copied three times into fresh databases on the target
// (without, with, without again: the first also warms the cache), under
// updates of 20 random rows of the range every 100 ms on the source.
func (lr *largeRun) gated(ctx context.Context) error {
	e, r := lr.e, lr.r
	ranges := []ring.Range{{Lo: 0, Hi: ring.MaxToken / 10}}
	set, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "orders", KeyColumn: "id"}}}, "source")
	if err != nil {
		return err
	}
	t := set.Tables[0]
	var inRange int64
	if err := e.srcPool.QueryRow(ctx, `SELECT count(*) FROM orders WHERE `+ring.Predicate(t.TokenSQL(""), ranges)).Scan(&inRange); err != nil {
		return err
	}
	wctx, stopUpdates := context.WithCancel(ctx)
	updated := make(chan struct{})
	go func() {
		defer close(updated)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tk.C:
			}
			_, _ = e.srcPool.Exec(wctx, `UPDATE orders SET amount = amount + 1, updated_at = now() WHERE id IN (SELECT 1 + (random() * ($1::bigint - 1))::bigint FROM generate_series(1, 200))
				AND `+ring.Predicate(t.TokenSQL(""), ranges), lr.rows)
		}
	}()
	defer func() { stopUpdates(); <-updated }()
	type result struct {
		took  time.Duration
		bytes int64
	}
	copyInto := func(i int, gated bool) (result, error) {
		var res result
		db := fmt.Sprintf("gate%d", i)
		if _, err := e.dstPool.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			return res, err
		}
		defer func() {
			_, _ = e.dstPool.Exec(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		}()
		dsn := e.dst.DSN(db, false)
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			return res, err
		}
		defer pool.Close()
		for _, q := range append([]string{ordersDDL}, ordersIndexes...) {
			if _, err := pool.Exec(ctx, q); err != nil {
				return res, err
			}
		}
		move := fmt.Sprintf("gatebench%d", i)
		opts := backfill.Options{Move: move, Set: set, Ranges: ranges, StreamDuringCopy: gated}
		var (
			s        *cdc.Stream
			names    cdc.Names
			stopS    = func() {}
			streamed = make(chan error, 1)
		)
		if gated {
			var l0 pglogrepl.LSN
			if names, l0, err = e.cdcJoinAt(ctx, move, set, ranges); err != nil {
				return res, err
			}
			defer func() {
				bg := context.WithoutCancel(ctx)
				_ = cdc.DropSlot(bg, e.srcPool, names.Slot)
				_ = cdc.DropPublication(bg, e.srcPool, names.Publication)
			}()
			if err := backfill.EnsureSchema(ctx, pool); err != nil {
				return res, err
			}
			s, err = cdc.New(cdc.Options{Move: move, SourceReplicationDSN: e.src.DSN("postgres", false) + "&replication=database", SourceDSN: e.src.DSN("postgres", false),
				TargetDSN: dsn, Slot: names.Slot, Publication: names.Publication, Origin: names.Origin, StartLSN: l0, Set: set, Ranges: ranges, CopyGate: move})
			if err != nil {
				return res, err
			}
			sctx, cancel := context.WithCancel(ctx)
			go func() { streamed <- s.Run(sctx) }()
			stopS = func() { cancel(); <-streamed }
		}
		start := time.Now()
		st, err := backfill.Copy(ctx, e.srcPool, pool, opts)
		res.took = time.Since(start)
		if err != nil {
			stopS()
			return res, fmt.Errorf("copy %d (gated %v): %w", i, gated, err)
		}
		if gated {
			payload := "gatebench-drained-" + move
			if err := cutover.EmitMarker(ctx, e.srcPool, payload); err != nil {
				stopS()
				return res, err
			}
			_, derr := s.DrainToMarker(ctx, payload)
			stopS()
			if derr != nil {
				return res, fmt.Errorf("drain the gated stream: %w", derr)
			}
			var n int64
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
				return res, err
			}
			if n != inRange {
				return res, fmt.Errorf("gated copy: %d rows on the target after the drain, the source's range has %d", n, inRange)
			}
			g := s.GateStats()
			fmt.Fprintf(r.out, "gated copy: gate skipped %d changes, held %d\n", g.Skipped, g.Held)
		}
		if err := pool.QueryRow(ctx, `SELECT pg_table_size('orders')`).Scan(&res.bytes); err != nil {
			return res, err
		}
		fmt.Fprintf(r.out, "copy %d (gated %v): %d rows, %s in %s\n", i, gated, st.Rows, gib(res.bytes), res.took.Round(time.Second))
		return res, nil
	}
	var runs []result
	for i, gated := range []bool{false, true, false} {
		res, err := copyInto(i, gated)
		if err != nil {
			return err
		}
		runs = append(runs, res)
	}
	rate := func(x result) float64 { return float64(x.bytes) / (1 << 30) / x.took.Hours() }
	plain := (rate(runs[0]) + rate(runs[2])) / 2
	r.add("large copy without the gate", plain, "GiB/h", fmt.Sprintf("%d rows (%s), a twentieth of the token space, into an empty table with its indexes: %s then %s (%.1f, %.1f GiB/h), under 200 updates of the range every 100 ms",
		inRange, gib(runs[0].bytes), runs[0].took.Round(time.Second), runs[2].took.Round(time.Second), rate(runs[0]), rate(runs[2])))
	r.add("large copy through the gate", rate(runs[1]), "GiB/h", fmt.Sprintf("the same copy with StreamDuringCopy and its stream beside it (cdc.Options.CopyGate), run between the two: %s; %.0f %% of the rate without",
		runs[1].took.Round(time.Second), 100*rate(runs[1])/plain))
	return nil
}
