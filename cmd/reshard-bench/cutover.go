package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cleanup"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/topology"
)

// runCutover measures the write pause of cutovers under writers going
// through the router (goal p99 ≤ 250 ms), checks the writers' ledger, and the
// fence trigger's overhead on CPU-bound single-row updates (goal ≤ 3 % paired, issue #29).
func runCutover(ctx context.Context, e *env, r *report) error {
	if err := benchPause(ctx, e, r); err != nil {
		return err
	}
	if !e.cfg.fenceTax {
		return nil
	}
	return benchFenceOverhead(ctx, e, r)
}

func benchPause(ctx context.Context, e *env, r *report) error {
	if err := e.truncateTarget(ctx); err != nil { // rows another section left there
		return err
	}
	// The control database lives on the source server.
	if _, err := e.srcPool.Exec(ctx, "DROP DATABASE IF EXISTS reshard_ctl WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := e.srcPool.Exec(ctx, "CREATE DATABASE reshard_ctl"); err != nil {
		return err
	}
	ctl, err := pgxpool.New(ctx, e.src.DSN("reshard_ctl", false))
	if err != nil {
		return err
	}
	defer ctl.Close()
	if err := topology.Migrate(ctx, ctl); err != nil {
		return err
	}
	store := topology.NewStore(ctl)
	for _, s := range []struct {
		name string
		port int
	}{{"source", e.src.Port}, {"target", e.dst.Port}} {
		ref := topology.ConnRef{Host: "127.0.0.1", Port: uint16(s.port), Database: "postgres", User: "postgres"}
		if err := store.RegisterShard(ctx, topology.Shard{Name: s.name, Conn: ref, State: topology.ShardActive}); err != nil {
			return err
		}
	}
	old := ring.MustNew([]ring.VNode{{Token: 0, Shard: "source"}})
	v1, err := topology.New(old, nil, "initial")
	if err != nil {
		return err
	}
	if _, err := store.Publish(ctx, 0, v1); err != nil {
		return err
	}
	// 1% of the token space moves.
	rg := ring.Range{Lo: 1e18, Hi: 1e18 + (ring.MaxToken/100)*2}
	next, moves, err := ring.PlanMove(old, rg, "target")
	if err != nil {
		return err
	}
	spec := tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}
	set, err := tableset.Introspect(ctx, e.dstPool, spec, "target")
	if err != nil {
		return err
	}
	m := cutover.Move{From: "source", To: "target", Source: e.srcPool, Target: e.dstPool, Set: set, Ranges: []ring.Range{moves[0].Range}}
	// The application's pools are its own, as in production: writers
	// sharing the cutover's pools (4 connections each) made the cutover's
	// statements wait for a connection a writer held, and counted that wait
	// in the write pause.
	pools := map[string]*pgxpool.Pool{}
	for name, srv := range map[string]interface{ DSN(string, bool) string }{"source": e.src, "target": e.dst} {
		p, err := pgxpool.New(ctx, srv.DSN("postgres", false))
		if err != nil {
			return err
		}
		defer p.Close()
		pools[name] = p
	}
	router, err := router.New(ctx, store, pools, router.Options{PollInterval: -1, FenceRetries: 12})
	if err != nil {
		return err
	}
	rctx, stopRouter := context.WithCancel(ctx)
	routerDone := make(chan struct{})
	go func() { router.Run(rctx); close(routerDone) }()
	defer func() { stopRouter(); <-routerDone }()

	// Writers: 4 workers on 2000 keys, half of them in the moving range.
	var keys []int64
	for k := int64(1); k <= int64(e.cfg.rows) && len(keys) < 2000; k++ {
		in := m.Ranges[0].Contains(ring.TokenInt64(k))
		if in || k%50 == 0 {
			keys = append(keys, k)
		}
	}
	l := ledger.New()
	cur, err := ledger.Read(ctx, e.srcPool, ledger.Table{Name: "users", Key: "id", Val: "email"}, keys)
	if err != nil {
		return err
	}
	for k, v := range cur {
		l.Ack(k, v)
	}
	wctx, stopWriters := context.WithCancel(ctx)
	st := ledger.Write(wctx, router, l, ledger.WriterOptions{Table: ledger.Table{Name: "users", Key: "id", Val: "email"}, Keys: keys, Workers: 4, Pause: time.Millisecond, DeleteEvery: -1})
	defer func() { stopWriters(); st.Wait() }()

	srcRepl := e.src.DSN("postgres", false) + "&replication=database"
	dstRepl := e.dst.DSN("postgres", false) + "&replication=database"
	var pauses []time.Duration
	start := time.Now()
	// One range moves source → target (cutover) and back (rollback during
	// GRACE: the same sequence reversed) each round, so 2×rounds write
	// pauses are measured, all under load.
	rounds := e.cfg.cutoverRounds
	for round := 0; round < rounds; round++ {
		m.ID = fmt.Sprintf("bench%d", round)
		fwd, rev, err := roundTrip(ctx, store, ctl, m, old, next, srcRepl, dstRepl, e)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		pauses = append(pauses, fwd.WritePause, rev.WritePause)
		fmt.Fprintf(e.out, "round %d: pause forward %s (%s), back %s (%s)\n", round, fwd.WritePause.Round(time.Millisecond), stepsString(fwd),
			rev.WritePause.Round(time.Millisecond), stepsString(rev))
	}
	elapsed := time.Since(start)
	stopWriters()
	st.Wait()
	bad, err := l.Check(ctx, ledger.Table{Name: "users", Key: "id", Val: "email"}, pools, func(int64) string { return "source" })
	if err != nil {
		return err
	}
	slices.Sort(pauses)
	q := func(p float64) float64 {
		return float64(pauses[min(len(pauses)-1, int(p*float64(len(pauses))))].Microseconds()) / 1000
	}
	details := fmt.Sprintf("%d cutovers (%d forward, %d back by rollback) of 1%% of the token space under 4 router writers on their own pools", len(pauses), rounds, rounds)
	r.add("cutover write pause p50", q(0.5), "ms", details)
	r.add("cutover write pause p99", q(0.99), "ms", details+"; goal ≤ 250")
	r.add("cutover write pause max", q(1), "ms", details)
	r.add("writes acknowledged during the cutovers", float64(st.Acked.Load()), "writes", fmt.Sprintf("in %s, %d failed", elapsed.Round(time.Second), st.Failed.Load()))
	r.add("ledger mismatches", float64(len(bad)), "keys", fmt.Sprintf("of %d keys checked on the owner after the last rollback", len(keys)))
	if len(bad) > 0 {
		return fmt.Errorf("ledger: %d keys lost their last acknowledged write, first %s", len(bad), bad[0])
	}
	if n := st.Failed.Load(); n > 0 {
		return fmt.Errorf("%d writes failed, last: %v", n, *st.LastErr.Load())
	}
	return nil
}

// stepsString is where a cutover's pause went, step by step (the gates
// are before it).
func stepsString(res cutover.Result) string {
	var b strings.Builder
	for _, s := range res.Steps {
		if s.Step == cutover.StepGates {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s %.1f", s.Step, float64(s.Duration.Microseconds())/1000)
	}
	return b.String() + " ms"
}

// roundTrip: JOINING, copy, forward CDC, cutover, GRACE for a moment, then
// rollback during GRACE (the reverse cutover). It returns both cutovers.
func roundTrip(ctx context.Context, store *topology.Store, ctl *pgxpool.Pool, m cutover.Move, old, next *ring.Ring, srcRepl, dstRepl string, e *env) (cutover.Result, cutover.Result, error) {
	var none cutover.Result
	if _, err := topology.Begin(next, m.Ranges, m.From, m.To, "begin "+m.ID).Publish(ctx, store); err != nil {
		return none, none, err
	}
	if err := cleanup.ReconcileBoth(ctx, m, fence.Control{Pool: ctl, Store: store}); err != nil {
		return none, none, err
	}
	names, err := cdc.NamesFor(m.ID)
	if err != nil {
		return none, none, err
	}
	if err := cdc.CreatePublication(ctx, m.Source, names.Publication, m.Set, m.Ranges); err != nil {
		return none, none, err
	}
	rc, err := pgconn.Connect(ctx, srcRepl)
	if err != nil {
		return none, none, err
	}
	l0, _, err := cdc.CreateSlot(ctx, rc, names.Slot)
	rc.Close(ctx)
	if err != nil {
		return none, none, err
	}
	if _, err := backfill.Copy(ctx, m.Source, m.Target, backfill.Options{Move: m.ID, Set: m.Set, Ranges: m.Ranges, ChunkRows: 5000}); err != nil {
		return none, none, err
	}
	fwdOpts := cdc.Options{Move: m.ID, SourceReplicationDSN: srcRepl, SourceDSN: e.src.DSN("postgres", false), TargetDSN: e.dst.DSN("postgres", false),
		Slot: names.Slot, Publication: names.Publication, Origin: names.Origin, StartLSN: l0, Set: m.Set, Ranges: m.Ranges}
	fwd, err := cdc.New(fwdOpts)
	if err != nil {
		return none, none, err
	}
	fctx, stopFwd := context.WithCancel(ctx)
	fdone := make(chan error, 1)
	go func() { fdone <- fwd.Run(fctx) }()
	stopForward := func() error {
		stopFwd()
		if err := <-fdone; !errors.Is(err, context.Canceled) {
			return fmt.Errorf("forward stream: %w", err)
		}
		return nil
	}
	// Catch up before the pause (the cutover's gate).
	gate := "bench-gate-" + m.ID
	if err := cutover.EmitMarker(ctx, m.Source, gate); err != nil {
		stopForward()
		return none, none, err
	}
	if _, err := fwd.DrainToMarker(ctx, gate); err != nil {
		stopForward()
		return none, none, err
	}
	_, revL0, err := join.Reverse(ctx, m, dstRepl)
	if err != nil {
		stopForward()
		return none, none, err
	}
	pg := cutover.NewPG(m, fwd, fence.Control{Pool: ctl, Store: store}, topology.CutOver(next, m.Ranges, m.From, m.To, "cutover "+m.ID), cutover.PGJournal{Pool: ctl, Move: m.ID})
	res, err := cutover.Run(ctx, pg, cutover.PGJournal{Pool: ctl, Move: m.ID}, cutover.Options{})
	if serr := stopForward(); err == nil {
		err = serr
	}
	if err != nil {
		return none, none, err
	}
	time.Sleep(500 * time.Millisecond) // GRACE: writes on the target
	rev, err := cdc.ReverseOptions(fwdOpts, e.src.DSN("postgres", false), dstRepl, m.Set, revL0)
	if err != nil {
		return none, none, err
	}
	back, err := rollback.DuringGrace(ctx, m, rev, rollback.Options{Store: store, Control: ctl, Old: old})
	if err != nil {
		return none, none, err
	}
	return res, back, nil
}

// benchFenceOverhead runs pgbench's single-row updates (CPU-bound: a small
// table in shared buffers, synchronous_commit off) against one server without
// the fence trigger, with it and an empty fence, and with it and a fence on a
// range no updated row touches, interleaved over rounds.
func benchFenceOverhead(ctx context.Context, e *env, r *report) error {
	pgbench := ""
	for _, p := range []string{filepath.Join(e.pg.Bin, "pgbench"), "/usr/lib/postgresql/15/bin/pgbench", "pgbench"} {
		if found, err := exec.LookPath(p); err == nil {
			pgbench = found
			break
		}
	}
	if pgbench == "" {
		return errors.New("pgbench not found (next to the PostgreSQL binaries, in /usr/lib/postgresql/15/bin or on PATH)")
	}
	if _, err := e.srcPool.Exec(ctx, "DROP DATABASE IF EXISTS fencebench WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := e.srcPool.Exec(ctx, "CREATE DATABASE fencebench"); err != nil {
		return err
	}
	base := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(e.src.Port), "-U", "postgres"}
	if out, err := exec.CommandContext(ctx, pgbench, append(base, "-i", "-q", "-s", "1", "fencebench")...).CombinedOutput(); err != nil {
		return fmt.Errorf("pgbench -i: %v: %s", err, out)
	}
	pool, err := pgxpool.New(ctx, e.src.DSN("fencebench", false))
	if err != nil {
		return err
	}
	defer pool.Close()
	set, err := tableset.Introspect(ctx, pool, tableset.Spec{Name: "pgbench", Tables: []tableset.TableSpec{{Table: "pgbench_accounts", KeyColumn: "aid"}}}, "source")
	if err != nil {
		return err
	}
	script := filepath.Join(e.dir, "update.sql")
	if err := os.WriteFile(script, []byte("\\set aid random(1, 100000)\nUPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n"), 0o644); err != nil {
		return err
	}
	untouched := []ring.Range{{Lo: 0, Hi: 1}} // no aid in 1..100000 has a token in (0, 1]
	// A twin of pgbench_accounts that never has the trigger, for the paired
	// runs (below).
	for _, q := range []string{
		"DROP TABLE IF EXISTS pgbench_accounts_plain",
		"CREATE TABLE pgbench_accounts_plain (LIKE pgbench_accounts INCLUDING ALL) WITH (fillfactor = 100)",
		"INSERT INTO pgbench_accounts_plain SELECT * FROM pgbench_accounts",
		"VACUUM ANALYZE pgbench_accounts_plain",
		"VACUUM ANALYZE pgbench_accounts",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	plainScript := filepath.Join(e.dir, "update_plain.sql")
	if err := os.WriteFile(plainScript, []byte("\\set aid random(1, 100000)\nUPDATE pgbench_accounts_plain SET abalance = abalance + 1 WHERE aid = :aid;\n"), 0o644); err != nil {
		return err
	}
	type mode struct {
		name  string
		setup func() error
		tps   []float64
		cpu   []float64 // server CPU µs per update
	}
	// The fence as a migration installs it: with the C accelerator where
	// the server has the extension reshard_fence, and its plpgsql
	// functions alone, which is what a server without it runs.
	accelerated := func(install func() error) func() error {
		return func() error {
			if err := install(); err != nil {
				return err
			}
			have, err := fence.Inspect(ctx, pool, set)
			if err != nil {
				return err
			}
			if !have[0].Accelerated {
				return errors.New("the fence is not accelerated: install the extension (make -C fence/ext/reshard_fence install) or run with -fence-tax=false")
			}
			return nil
		}
	}
	installAccel := accelerated(func() error { return fence.InstallTriggers(ctx, pool, set, false) })
	installPlpgsql := func() error { return fence.InstallPlpgsqlTriggers(ctx, pool, set) }
	// The floor of any fence that is a row trigger: PostgreSQL's own work
	// for a BEFORE ROW UPDATE trigger (it locks the row before the update:
	// heap_lock_tuple, a WAL record), with a built-in C trigger function
	// that does next to nothing (suppress_redundant_updates_trigger
	// compares the old and new row and returns the new one).
	floor := "CREATE TRIGGER bench_floor BEFORE UPDATE ON pgbench_accounts FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()"
	noFloor := "DROP TRIGGER IF EXISTS bench_floor ON pgbench_accounts"
	modes := []*mode{
		{name: "no trigger", setup: func() error {
			if _, err := pool.Exec(ctx, noFloor); err != nil {
				return err
			}
			return fence.RemoveTriggers(ctx, pool, set)
		}},
		{name: "C BEFORE ROW trigger that returns the row (the floor)", setup: func() error {
			if err := fence.RemoveTriggers(ctx, pool, set); err != nil {
				return err
			}
			_, err := pool.Exec(ctx, noFloor+"; "+floor)
			return err
		}},
	}
	for _, m := range []struct {
		name    string
		install func() error
	}{{"accelerated trigger", installAccel}, {"plpgsql trigger", installPlpgsql}} {
		modes = append(modes, &mode{name: m.name + ", empty fence", setup: func() error {
			if _, err := pool.Exec(ctx, noFloor); err != nil {
				return err
			}
			if err := m.install(); err != nil {
				return err
			}
			return fence.Clear(ctx, pool, set)
		}}, &mode{name: m.name + ", fence on an untouched range", setup: func() error {
			if _, err := pool.Exec(ctx, noFloor); err != nil {
				return err
			}
			if err := m.install(); err != nil {
				return err
			}
			return fence.Fence(ctx, pool, set, untouched, 0)
		}})
	}
	// No autovacuum worker in the measured CPU (below); the table is
	// throwaway.
	for _, tb := range []string{"pgbench_accounts", "pgbench_accounts_plain", "pgbench_branches", "pgbench_tellers", "pgbench_history"} {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{tb}.Sanitize()+" SET (autovacuum_enabled = false)"); err != nil {
			return err
		}
	}
	// The server's CPU time: pgbench's backends are children of the
	// postmaster, which collects their CPU time when they exit (cutime and
	// cstime of /proc/<postmaster>/stat). Per update, it leaves out the time
	// a backend waits for a CPU, but not what other processes do to its
	// caches and clock: on a busy machine it spreads too.
	var postmaster int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&postmaster); err != nil {
		return err
	}
	postmaster, err = procStat(postmaster, 4)
	if err != nil {
		return err
	}
	childCPU := func() (time.Duration, error) {
		ut, err := procStat(postmaster, 16)
		if err != nil {
			return 0, err
		}
		st, err := procStat(postmaster, 17)
		// USER_HZ: /proc reports clock ticks of 10 ms.
		return time.Duration(ut+st) * 10 * time.Millisecond, err
	}
	tpsRe := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	txRe := regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)
	run := func(md *mode, secs int) error {
		if err := md.setup(); err != nil {
			return fmt.Errorf("%s: %w", md.name, err)
		}
		if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		cpu0, err := childCPU()
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, pgbench, append(base, "-n", "-c", "2", "-j", "2", "-T", strconv.Itoa(secs), "-M", "prepared", "-f", script, "fencebench")...)
		cmd.Env = append(cmd.Environ(), "PGOPTIONS=-c synchronous_commit=off", "PGAPPNAME=fencebench")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("pgbench (%s): %v: %s", md.name, err, out)
		}
		mt, mx := tpsRe.FindSubmatch(out), txRe.FindSubmatch(out)
		if mt == nil || mx == nil {
			return fmt.Errorf("pgbench (%s): no tps in %s", md.name, out)
		}
		tps, _ := strconv.ParseFloat(string(mt[1]), 64)
		n, _ := strconv.ParseFloat(string(mx[1]), 64)
		// Until pgbench's backends have exited and been collected.
		for deadline := time.Now().Add(10 * time.Second); ; {
			var left int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'fencebench'").Scan(&left); err != nil {
				return err
			}
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		cpu1, err := childCPU()
		if err != nil {
			return err
		}
		md.tps = append(md.tps, tps)
		md.cpu = append(md.cpu, float64((cpu1-cpu0).Microseconds())/n)
		fmt.Fprintf(e.out, "%s: %.0f tps, server CPU %.1f µs per update\n", md.name, tps, md.cpu[len(md.cpu)-1])
		return nil
	}
	// Rounds of one run per mode, the order rotated from round to round so
	// that a drift of the machine's load does not favour one mode; the
	// overhead is the median over rounds of each round's ratio to the run
	// without the trigger, which cancels load that changes between rounds.
	const rounds, secs = 7, 6
	loadBefore := loadAvg()
	if err := run(modes[0], 3); err != nil { // warm-up: caches, pgbench
		return err
	}
	modes[0].tps, modes[0].cpu = nil, nil
	for round := 0; round < rounds; round++ {
		fmt.Fprintf(e.out, "round %d (load average %s)\n", round, loadAvg())
		for i := range modes {
			if err := run(modes[(round+i)%len(modes)], secs); err != nil {
				return err
			}
		}
	}
	// Paired runs: each pgbench client picks, per transaction at random,
	// the update of pgbench_accounts (with the trigger) or of its twin
	// without it, so both see the same machine at the same moments; the
	// overhead is 1 - (latency without)/(latency with), a throughput loss
	// that other load on the machine hardly moves. The mode without the
	// trigger runs paired too: two tables without a trigger, whose
	// "overhead" is what the method reads where there is none (an A/A
	// control: at load 13, its median was 2.8 %, min -1.4, max 6.0).
	scriptRe := regexp.MustCompile(`(?s)SQL script \d+: ([^\n]+)\n.*?latency average = ([0-9.]+) ms`)
	paired := map[string][]float64{}
	for round := 0; round < rounds; round++ {
		for i := range modes {
			md := modes[(round+i)%len(modes)]
			if err := md.setup(); err != nil {
				return fmt.Errorf("%s: %w", md.name, err)
			}
			cmd := exec.CommandContext(ctx, pgbench, append(base, "-n", "-c", "2", "-j", "2", "-T", strconv.Itoa(secs), "-M", "prepared", "-f", plainScript, "-f", script, "fencebench")...)
			cmd.Env = append(cmd.Environ(), "PGOPTIONS=-c synchronous_commit=off")
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("pgbench (paired, %s): %v: %s", md.name, err, out)
			}
			lat := map[string]float64{}
			for _, m := range scriptRe.FindAllSubmatch(out, -1) {
				lat[string(m[1])], _ = strconv.ParseFloat(string(m[2]), 64)
			}
			if lat[plainScript] == 0 || lat[script] == 0 {
				return fmt.Errorf("pgbench (paired, %s): no per-script latency in %s", md.name, out)
			}
			paired[md.name] = append(paired[md.name], 100*(1-lat[plainScript]/lat[script]))
			fmt.Fprintf(e.out, "paired, %s: latency %.3f ms without the trigger, %.3f ms with it (load average %s)\n", md.name, lat[plainScript], lat[script], loadAvg())
		}
	}
	median := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		if len(s)%2 == 0 {
			return (s[len(s)/2-1] + s[len(s)/2]) / 2
		}
		return s[len(s)/2]
	}
	details := fmt.Sprintf("pgbench single-row UPDATE by aid, scale 1, 2 clients, -M prepared, synchronous_commit=off, %d rounds of interleaved %ds runs (order rotated), load average %s → %s",
		rounds, secs, loadBefore, loadAvg())
	r.add("pgbench updates, no trigger", median(modes[0].tps), "tps", details+"; median")
	r.add("server CPU per update, no trigger", median(modes[0].cpu), "µs", "postgres backends' CPU time / updates; median")
	r.add("fence trigger overhead, paired, no trigger (A/A control)", median(paired[modes[0].name]), "%",
		fmt.Sprintf("the paired method between two tables without a trigger: median of %d %ds runs (min %.1f, max %.1f); what the method reads where there is nothing to read",
			rounds, secs, slices.Min(paired[modes[0].name]), slices.Max(paired[modes[0].name])))
	for _, md := range modes[1:] {
		tpsOver := make([]float64, rounds)
		cpuOver := make([]float64, rounds)
		for i := range tpsOver {
			tpsOver[i] = 100 * (1 - md.tps[i]/modes[0].tps[i])
			cpuOver[i] = 100 * (md.cpu[i]/modes[0].cpu[i] - 1)
		}
		r.add("pgbench updates, "+md.name, median(md.tps), "tps", details+"; median")
		r.add("fence trigger overhead, "+md.name, median(tpsOver), "%",
			fmt.Sprintf("throughput lost: median of per-round ratios to no trigger (min %.1f, max %.1f); goal ≤ 15", slices.Min(tpsOver), slices.Max(tpsOver)))
		r.add("fence trigger overhead, paired, "+md.name, median(paired[md.name]), "%",
			fmt.Sprintf("throughput lost, per-transaction random choice between the table with the trigger and its twin without it: median of %d %ds runs (min %.1f, max %.1f); goal ≤ 3",
				rounds, secs, slices.Min(paired[md.name]), slices.Max(paired[md.name])))
		r.add("fence trigger CPU overhead, "+md.name, median(cpuOver), "%",
			fmt.Sprintf("server CPU per update over no trigger: median of per-round ratios (min %.1f, max %.1f); spreads widely on a busy machine (cache, frequency): read the paired figure first", slices.Min(cpuOver), slices.Max(cpuOver)))
	}
	if _, err := pool.Exec(ctx, noFloor); err != nil {
		return err
	}
	return fence.RemoveTriggers(ctx, pool, set)
}

// procStat returns field n (1-based, as proc(5) numbers them; n ≥ 4) of
// /proc/<pid>/stat as an integer.
func procStat(pid, n int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < n-2 {
		return 0, fmt.Errorf("/proc/%d/stat: no field %d in %q", pid, n, b)
	}
	return strconv.Atoi(f[n-3])
}
