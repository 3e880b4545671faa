package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/demo"
	"github.com/reshard/reshard/internal/ledger"
	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// demoOptions are the flags of reshard demo.
type demoOptions struct {
	shards        int
	users         int64
	ordersPerUser int
	payloadBytes  int
	writers       int
	ledgerKeys    int
	grace         time.Duration
	rowsPerSec    float64
	keep          bool
	listen        string
	timeout       time.Duration
}

func newDemoCmd(opts *globalOptions) *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The whole story end to end: a cluster under live writes gains a shard, nothing is lost",
		Long: `reshard demo starts a local cluster (control DB, N shards and one spare, Temporal),
loads users and orders sharded by user id, starts a worker and writers that go through
the router with a ledger of every acknowledged write, runs add-node to the end
(PLAN → JOINING → SNAPSHOT_COPY → CDC_CATCH_UP → VERIFY → CUTOVER → GRACE → CLEANUP),
then checks every key against the ledger and every row's placement, and prints a summary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.shards < 1 || o.users < 1 || o.writers < 1 || o.ledgerKeys < 1 || o.ordersPerUser < 0 || o.payloadBytes < 0 {
				return usageError{errors.New("--shards, --users, --writers and --ledger-keys must be at least 1; --orders-per-user and --payload-bytes at least 0")}
			}
			// The demo has a cluster of its own, so that it never touches the
			// one `reshard dev up` manages.
			if f := cmd.Flag("state-dir"); f != nil && !f.Changed && os.Getenv("RESHARD_STATE_DIR") == "" {
				opts.stateDir = ".reshard/demo"
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if !cmd.Flags().Changed("listen") {
				o.listen = "" // the free port dev up writes to the demo's reshard.yaml
			}
			return runDemo(ctx, cmd.OutOrStdout(), opts, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.shards, "shards", 4, "shards before the migration (one more server is started as the new shard)")
	f.Int64Var(&o.users, "users", 1_000_000, "users to load (orders and payloads scale with it)")
	f.IntVar(&o.ordersPerUser, "orders-per-user", 2, "orders per user")
	f.IntVar(&o.payloadBytes, "payload-bytes", 3000, "size of the TOASTed users.payload of one user in ten")
	f.IntVar(&o.writers, "writers", 8, "concurrent writers through the router")
	f.IntVar(&o.ledgerKeys, "ledger-keys", 20_000, "users the writers update and delete (each write acknowledged in the ledger)")
	f.DurationVar(&o.grace, "grace", 15*time.Second, "GRACE period before cleanup")
	f.Float64Var(&o.rowsPerSec, "rows-per-sec", 0, "copy throttle per move (0: unlimited)")
	f.BoolVar(&o.keep, "keep", false, "leave the cluster, Temporal and its UI running afterwards (default: the demo removes its cluster at the end)")
	f.StringVar(&o.listen, "listen", "", "the worker's /metrics and /healthz address (default: a free loopback port, worker.listen of the demo's reshard.yaml)")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up when the migration has not ended by then")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, opts *globalOptions, o demoOptions) error {
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, "%s  "+format+"\n", append([]any{time.Since(start).Round(time.Second)}, args...)...)
	}
	newShard := "shard" + strconv.Itoa(o.shards+1)

	// 1. The cluster: control DB, N+1 shard servers (the last one joins), Temporal.
	say("starting the local cluster in %s: control DB, %d shards + %s (spare), Temporal", opts.stateDir, o.shards, newShard)
	cl, err := devenv.Up(ctx, devenv.Options{StateDir: opts.stateDir, Shards: o.shards + 1})
	if err != nil {
		return err
	}
	if !o.keep {
		// Without --keep the demo removes its cluster, so the next run starts
		// afresh.
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			if err := devenv.Destroy(dctx, opts.stateDir); err != nil {
				fmt.Fprintln(os.Stderr, "reshard demo: removing the demo cluster:", err)
			}
		}()
	}
	cfg, err := (&configFlags{path: cl.ConfigPath()}).load(opts)
	if err != nil {
		return err
	}
	say("Temporal UI: %s/namespaces/%s/workflows", cfg.Temporal.UI, cfg.Temporal.Namespace)

	store, ctl, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer ctl.Close()
	pools := map[string]*pgxpool.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, name := range cfg.ShardNames() {
		if pools[name], err = cfg.connect(ctx, "shard "+name, cfg.Shards[name]); err != nil {
			return err
		}
	}

	// 2. Topology v1 over the first N shards.
	var members []string
	for i := 1; i <= o.shards; i++ {
		members = append(members, "shard"+strconv.Itoa(i))
	}
	if err := topology.Migrate(ctx, ctl); err != nil {
		return fmt.Errorf("create the topology schema in the control DB: %w", err)
	}
	first, err := planInit(ctx, cfg, store, members, ring.Options{VNodes: 16, Tokens: ring.AllocBalanced})
	if err != nil {
		return err
	}
	topo, _, err := initTopology(ctx, cfg, store, members, first)
	if err != nil {
		return err
	}
	if topo.Version != 1 || topo.Ring.HasShard(newShard) || len(topo.Ring.Shards()) != o.shards {
		return usageError{fmt.Errorf("the cluster in %s already ran a demo (topology v%d: %s): start afresh with reshard dev destroy --state-dir %s, or use another --state-dir",
			opts.stateDir, topo.Version, strings.Join(topo.Ring.Shards(), ", "), opts.stateDir)}
	}

	// 3. Schema and data.
	if err := demo.CreateSchema(ctx, pools); err != nil {
		return err
	}
	say("loading %d users, %d orders each, payloads of %d bytes (TOAST) for one user in ten", o.users, o.ordersPerUser, o.payloadBytes)
	t0 := time.Now()
	rows, err := demo.Load(ctx, pools, topo.Ring, demo.LoadOptions{Users: o.users, OrdersPerUser: o.ordersPerUser, PayloadBytes: o.payloadBytes, SkipIfNotEmpty: true})
	if err != nil {
		return err
	}
	say("loaded %d rows in %s", rows, time.Since(t0).Round(100*time.Millisecond))
	spec, err := parseTableSpec([]string{"users:id", "orders:user_id"}, topology.DefaultKeyspace)
	if err != nil {
		return err
	}
	t0 = time.Now()
	if _, err := registerKeyspace(ctx, cfg, store, ctl, topology.DefaultKeyspace, spec); err != nil {
		return err
	}
	say("keyspace %s: users and orders registered (every row checked on its owner) and every shard fenced where it owns nothing, in %s",
		topology.DefaultKeyspace, time.Since(t0).Round(100*time.Millisecond))

	// 4. A worker, in this process.
	wctx, stopWorker := context.WithCancel(ctx)
	wopts := *opts
	// The demo prints its own progress; the SDK logs every cancelled stream
	// (the CDC activity is cancelled at each cutover) as an error.
	wopts.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	if o.listen == "" {
		o.listen = cmp.Or(cfg.Listen, "127.0.0.1:9464")
	}
	var workerErr error
	workerExited := make(chan struct{})
	go func() {
		defer close(workerExited)
		workerErr = runWorker(wctx, &wopts, cfg, workerFlags{listen: o.listen})
	}()
	defer func() {
		stopWorker()
		<-workerExited
	}()
	// Started is when Temporal lists it as polling: before, the migration's
	// start would warn that no worker runs it.
	tc, err := cfg.dialTemporal(ctx, opts)
	if err != nil {
		return err
	}
	defer tc.Close()
	for {
		polls, err := workerRuns(ctx, tc, cfg)
		if err != nil {
			return err
		}
		if polls {
			break
		}
		select {
		case <-workerExited:
			return fmt.Errorf("the worker stopped: %v", workerErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	say("worker started (metrics on http://%s/metrics)", o.listen)

	// 5. Writers through the router, each write acknowledged in the ledger.
	router, err := router.New(ctx, store, pools, router.Options{PollInterval: 500 * time.Millisecond})
	if err != nil {
		return err
	}
	rctx, stopRouter := context.WithCancel(ctx)
	defer stopRouter()
	go func() { _ = router.Run(rctx) }()
	led := ledger.New()
	keys := ledgerKeys(o.users, o.ledgerKeys)
	for _, k := range keys {
		led.Ack(k, ledger.Value{V: "name " + strconv.FormatInt(k, 10)})
	}
	usersTable := ledger.Table{Name: "users", Key: "id", Val: "name"}
	wctxW, stopWriters := context.WithCancel(ctx)
	stats := ledger.Write(wctxW, router, led, ledger.WriterOptions{Table: usersTable, Keys: keys, Workers: o.writers, Pause: 2 * time.Millisecond, Seed: uint64(start.UnixNano())})
	writersStopped := false
	stopW := func() {
		if !writersStopped {
			writersStopped = true
			stopWriters()
			stats.Wait()
		}
	}
	defer stopW()
	say("%d writers updating and deleting %d users through the router", o.writers, len(keys))

	// 6. add-node.
	var mf migrationFlags // no --table: a migration moves the keyspace's tables
	mf.vnodes, mf.tokens, mf.grace, mf.cutoverBudget, mf.maxLagBytes = workflows.DefaultVNodes, workflows.DefaultTokens, o.grace, workflows.DefaultCutoverBudget, workflows.DefaultMaxLagBytes
	mf.chunkRows, mf.verifyChunkRows = workflows.DefaultCopyChunkRows, workflows.DefaultVerifyChunkRows
	mf.rowsPerSec = o.rowsPerSec
	mf.onVerifyFail = string(workflows.VerifyFailWait)
	req, err := buildRequest(workflows.KindAddNode, []string{newShard}, mf)
	if err != nil {
		return usageError{err}
	}
	if req.Keyspace, req.Tables, _, err = migrationKeyspace(ctx, store, topology.DefaultKeyspace, req.Tables); err != nil {
		return err
	}
	reg, err := plan.Registry(ctx, store)
	if err != nil {
		return controlErr(err)
	}
	p, err := planMigration(cfg, topo, reg, req)
	if err != nil {
		return err
	}
	startCmd := &cobra.Command{}
	startCmd.SetOut(out)
	if err := startMigration(ctx, startCmd, opts, cfg, p, false); err != nil {
		return err
	}
	wfID := workflows.MigrationWorkflowID(p.Request.ID)

	// 7. Follow it to the end.
	deadline := time.Now().Add(o.timeout)
	last := map[string]string{}
	var st workflows.MigrationState
	var peakLag int64
	etas := map[string]*etaCheck{} // by move id
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-workerExited:
			return fmt.Errorf("the worker stopped: %v", workerErr)
		case <-time.After(time.Second):
		}
		s, err := queryState(ctx, tc, wfID, 10*time.Second)
		if err == nil {
			st = s
			statusview.PrintChanges(out, st, last, time.Now())
			for _, m := range st.Moves {
				peakLag = max(peakLag, m.LagBytes)
				if etas[m.Spec.ID] == nil {
					etas[m.Spec.ID] = &etaCheck{}
				}
				etas[m.Spec.ID].observe(m, time.Now())
			}
		}
		desc, derr := tc.DescribeWorkflowExecution(ctx, wfID, "")
		if derr == nil && desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if s, err := queryState(ctx, tc, wfID, 10*time.Second); err == nil {
				st = s
			}
			if desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				return fmt.Errorf("migration %s ended %s (%s): see %s", p.Request.ID, statusText(desc.WorkflowExecutionInfo.Status), st.Error, cfg.uiLink(wfID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()))
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("migration %s did not end within --timeout %s: see %s", p.Request.ID, o.timeout, cfg.uiLink(wfID, runIDOf(ctx, tc, wfID)))
		}
	}
	migrationTime := time.Since(t0)

	// 8. Stop the writers, then check every key and every row.
	stopW()
	if err := router.Refresh(ctx); err != nil {
		return err
	}
	final := router.Topology()
	mismatches, err := led.Check(ctx, usersTable, pools, func(k int64) string { return final.Ring.OwnerInt64(k) })
	if err != nil {
		return err
	}
	place, err := demo.CheckPlacement(ctx, pools, final.Ring)
	if err != nil {
		return err
	}
	sum := demoSummary{
		State: st, Plan: p, Final: final, Stats: stats, Mismatches: mismatches, Placement: place, PeakLag: peakLag,
		Rows: rows, Elapsed: migrationTime, Ledger: len(keys), ETAs: etas,
	}
	sum.print(out)
	if o.keep {
		fmt.Fprintf(out, "\nThe cluster and Temporal keep running (--keep): UI %s; reshard dev status --state-dir %[2]s, reshard dev psql %[3]s --state-dir %[2]s; stop with reshard dev down --state-dir %[2]s.\n", cfg.Temporal.UI, opts.stateDir, newShard)
	}
	if len(mismatches) > 0 || !place.OK() {
		return fmt.Errorf("the demo found %d acknowledged writes not on their owner and %d misplaced rows", len(mismatches), sumValues(place.Misplaced))
	}
	return nil
}

// ledgerKeys spreads n keys over 1..users.
func ledgerKeys(users int64, n int) []int64 {
	if int64(n) > users {
		n = int(users)
	}
	step := users / int64(n)
	keys := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		keys = append(keys, 1+int64(i)*step)
	}
	return keys
}

func sumValues(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

type demoSummary struct {
	State      workflows.MigrationState
	Plan       *migrationPlan
	Final      topology.Topology
	Stats      *ledger.Stats
	Mismatches []ledger.Mismatch
	Placement  demo.Placement
	PeakLag    int64
	Rows       int64
	Elapsed    time.Duration
	Ledger     int
	ETAs       map[string]*etaCheck
}

// etaCheck compares the copy ETA status showed once a move had copied 10%
// of its estimated rows with the time its copy then really took: the
// predicted end (the instant status showed the ETA at, plus the ETA: the
// copy's own CopyEnd) against the end of SNAPSHOT_COPY in the move's
// timings, the error relative to the time that was left when it was shown.
type etaCheck struct {
	At     time.Time // when the move first showed 10% or more with an ETA
	End    time.Time // the end it predicted (At + the ETA shown)
	Copied float64   // the fraction of the estimate copied then
}

func (e *etaCheck) observe(m workflows.MoveState, now time.Time) {
	if !e.At.IsZero() || m.CopyDone || m.CopyEnd.IsZero() || m.Spec.EstRows <= 0 || m.RowsCopied*10 < m.Spec.EstRows {
		return
	}
	e.At, e.End, e.Copied = now, m.CopyEnd, float64(m.RowsCopied)/float64(m.Spec.EstRows)
}

// etaJudgedBy is how far into a copy its first estimate may come and be
// judged: the copy's rate window needs a second of chunks, which is most of
// a copy of seconds.
const etaJudgedBy = 0.25

// predicted is the ETA status showed (never below zero, as status shows it).
func (e *etaCheck) predicted() time.Duration { return max(e.End.Sub(e.At), 0) }

// actual is the rest of the copy as it happened: from the prediction to
// the end of SNAPSHOT_COPY in the move's own timings (0: not known).
func (e *etaCheck) actual(m workflows.MoveState) time.Duration {
	for _, t := range m.Timings {
		if t.Phase == workflows.PhaseSnapshotCopy && !t.End.IsZero() && !e.At.IsZero() && t.End.After(e.At) {
			return t.End.Sub(e.At)
		}
	}
	return 0
}

func (s demoSummary) print(out io.Writer) {
	st := s.State
	var rows, bytes, verified int64
	var pauses []time.Duration
	verifyOK := len(st.Moves) > 0
	phase := map[workflows.Phase]time.Duration{}
	var copyRate []float64
	var copyStart, copyEnd time.Time
	for _, m := range st.Moves {
		rows += m.RowsCopied
		bytes += m.BytesCopied
		if m.Verify == nil || !m.Verify.Passed {
			verifyOK = false
		} else {
			verified += m.Verify.Rows
		}
		if p := max(m.Pauses.Total, m.WritePause); p > 0 {
			pauses = append(pauses, p) // every attempt's pause, aborted ones included
		}
		for _, t := range m.Timings {
			if !t.End.IsZero() {
				d := t.End.Sub(t.Start)
				phase[t.Phase] = max(phase[t.Phase], d)
				if t.Phase == workflows.PhaseSnapshotCopy && d > 0 {
					copyRate = append(copyRate, float64(m.RowsCopied)/d.Seconds())
					if copyStart.IsZero() || t.Start.Before(copyStart) {
						copyStart = t.Start
					}
					if t.End.After(copyEnd) {
						copyEnd = t.End
					}
				}
			}
		}
	}
	slices.Sort(pauses)
	fmt.Fprintf(out, "\n== reshard demo: add-node %s ==\n", st.Request.Shard)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "rows in the cluster\t%d (users + orders)\n", s.Rows)
	fmt.Fprintf(w, "rows moved\t%d (%s)\n", rows, workflows.HumanBytes(bytes))
	fmt.Fprintf(w, "moved fraction\t%.4f of the token space (modulo would move %.4f; ideal %.4f)\n", s.Plan.Moved, s.Plan.Modulo, s.Plan.Ideal)
	fmt.Fprintf(w, "moves\t%d (one slot each), migration took %s\n", len(st.Moves), s.Elapsed.Round(100*time.Millisecond))
	var names []string
	for p := range phase {
		names = append(names, string(p))
	}
	order := func(p string) int { return slices.Index(workflows.Phases, workflows.Phase(p)) }
	sort.Slice(names, func(i, j int) bool { return order(names[i]) < order(names[j]) })
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s", n, phase[workflows.Phase(n)].Round(10*time.Millisecond)))
	}
	fmt.Fprintf(w, "phase durations (slowest move)\t%s\n", strings.Join(parts, ", "))
	if len(copyRate) > 0 {
		var total float64
		for _, r := range copyRate {
			total += r
		}
		fmt.Fprintf(w, "copy rate\t%.0f rows/s in all (%d moves in parallel, %.0f rows/s each on average)\n",
			float64(rows)/copyEnd.Sub(copyStart).Seconds(), len(copyRate), total/float64(len(copyRate)))
	}
	fmt.Fprintf(w, "CDC lag peak\t%s\n", workflows.HumanBytes(s.PeakLag))
	if len(pauses) > 0 {
		fmt.Fprintf(w, "write pause\tp50 %s, p99 %s, max %s over %d cutovers\n", pct(pauses, 0.50), pct(pauses, 0.99), pauses[len(pauses)-1].Round(time.Millisecond), len(pauses))
	}
	for _, m := range st.Moves {
		pause := m.PauseText()
		if len(m.PauseSteps) > 0 {
			pause += " (" + workflows.PauseStepsText(m.PauseSteps) + ")"
		}
		fmt.Fprintf(w, "  %s → %s\t%s, %d rows copied, write pause %s\n", m.Spec.Source, m.Spec.Target, m.Phase, m.RowsCopied, pause)
	}
	if line := etaLine(st.Moves, s.ETAs); line != "" {
		fmt.Fprintf(w, "copy ETA at 10%%\t%s\n", line)
	}
	verdict := "FAILED"
	if verifyOK {
		verdict = "passed"
	}
	fmt.Fprintf(w, "verify\t%s (%d rows compared at one LSN)\n", verdict, verified)
	fmt.Fprintf(w, "topology\tv%d: %s\n", s.Final.Version, strings.Join(s.Final.Ring.Shards(), ", "))
	fmt.Fprintf(w, "writes acknowledged\t%d (%d failed, %d fence errors after retries) on %d keys\n", s.Stats.Acked.Load(), s.Stats.Failed.Load(), s.Stats.FenceErrors.Load(), s.Ledger)
	fmt.Fprintf(w, "acknowledged writes lost\t%d\n", len(s.Mismatches))
	fmt.Fprintf(w, "rows not on their owner\t%d\n", sumValues(s.Placement.Misplaced))
	w.Flush()
	for i, m := range s.Mismatches {
		if i == 10 {
			fmt.Fprintf(out, "  ... and %d more\n", len(s.Mismatches)-10)
			break
		}
		fmt.Fprintf(out, "  lost: %s\n", m)
	}
}

// pct is the q-quantile of sorted durations (nearest rank).
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Round(time.Millisecond)
}

// etaLine compares each move's first ETA past 10% with the time its copy
// then took; the worst error counts the estimates shown by etaJudgedBy
// copied ("" when no move showed one).
func etaLine(moves []workflows.MoveState, etas map[string]*etaCheck) string {
	worst, judged := -1.0, 0
	var etaParts []string
	for _, m := range moves {
		e := etas[m.Spec.ID]
		if e == nil || e.At.IsZero() {
			continue
		}
		if act := e.actual(m); act > 0 {
			errPct := 100 * math.Abs(float64(e.predicted()-act)) / float64(act)
			note := ""
			if e.Copied <= etaJudgedBy {
				worst, judged = max(worst, errPct), judged+1
			} else {
				note = ", late"
			}
			etaParts = append(etaParts, fmt.Sprintf("%s→%s at %.0f%% %s vs %s (%.0f%%%s)", m.Spec.Source, m.Spec.Target, 100*e.Copied,
				e.predicted().Round(100*time.Millisecond), act.Round(100*time.Millisecond), errPct, note))
		}
	}
	if len(etaParts) > 0 {
		verdict := fmt.Sprintf("worst error %.0f%%", worst)
		if judged < len(etaParts) {
			verdict = fmt.Sprintf("worst error %.0f%% over the %d shown by %.0f%% copied; a copy of seconds shows its first estimate later (late)",
				worst, judged, 100*etaJudgedBy)
			if judged == 0 {
				verdict = fmt.Sprintf("not judged: no first estimate by %.0f%% copied (the copies took seconds; try --users 4000000 or --rows-per-sec)", 100*etaJudgedBy)
			}
		}
		return fmt.Sprintf("predicted vs actual: %s; %s", strings.Join(etaParts, ", "), verdict)
	}
	return ""
}
