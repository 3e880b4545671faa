package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/demo"
	"github.com/reshard/reshard/keyspace/register"
	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/request"
	"github.com/reshard/reshard/ring"
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

// demoRun is one run of the demo: what its steps share, and the cleanups
// they registered (run last first when the demo ends).
type demoRun struct {
	out      io.Writer
	opts     *globalOptions
	o        demoOptions
	start    time.Time
	newShard string
	cfg      *clusterConfig
	cl       clusterPools // the control database and the shards
	tc       client.Client
	cleanups []func()

	workerExited chan struct{}
	workerErr    error
}

func (d *demoRun) say(format string, args ...any) {
	fmt.Fprintf(d.out, "%s  "+format+"\n", append([]any{time.Since(d.start).Round(time.Second)}, args...)...)
}

func (d *demoRun) onExit(f func()) { d.cleanups = append(d.cleanups, f) }

// workerStopped is the error of a worker that exited before the demo ended.
func (d *demoRun) workerStopped() error { return fmt.Errorf("the worker stopped: %v", d.workerErr) }

func runDemo(ctx context.Context, out io.Writer, opts *globalOptions, o demoOptions) error {
	d := &demoRun{out: out, opts: opts, o: o, start: time.Now(), newShard: "shard" + strconv.Itoa(o.shards+1)}
	defer func() {
		for i := len(d.cleanups) - 1; i >= 0; i-- {
			d.cleanups[i]()
		}
	}()
	topo, err := d.cluster(ctx)
	if err != nil {
		return err
	}
	rows, err := d.data(ctx, topo)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.register(ctx); err != nil {
		return err
	}
	if err := d.worker(ctx); err != nil {
		return err
	}
	w, err := d.writers(ctx)
	if err != nil {
		return err
	}
	p, err := d.addNode(ctx, topo)
	if err != nil {
		return err
	}
	sum, err := d.follow(ctx, p)
	if err != nil {
		return err
	}
	sum.Elapsed, sum.Rows = time.Since(t0), rows
	return d.check(ctx, w, sum)
}

// cluster starts the cluster (control DB, N+1 shard servers: the last one
// joins, Temporal), connects to it and publishes topology v1 over the first
// N shards.
func (d *demoRun) cluster(ctx context.Context) (topology.Topology, error) {
	d.say("starting the local cluster in %s: control DB, %d shards + %s (spare), Temporal", d.opts.stateDir, d.o.shards, d.newShard)
	cl, err := devenv.Up(ctx, devenv.Options{StateDir: d.opts.stateDir, Shards: d.o.shards + 1})
	if err != nil {
		return topology.Topology{}, err
	}
	if !d.o.keep {
		// Without --keep the demo removes its cluster, so the next run starts
		// afresh.
		d.onExit(func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			if err := devenv.Destroy(dctx, d.opts.stateDir); err != nil {
				fmt.Fprintln(os.Stderr, "reshard demo: removing the demo cluster:", err)
			}
		})
	}
	if d.cfg, err = (&configFlags{path: cl.ConfigPath()}).load(d.opts); err != nil {
		return topology.Topology{}, err
	}
	d.say("Temporal UI: %s/namespaces/%s/workflows", d.cfg.Temporal.UI, d.cfg.Temporal.Namespace)
	var closeAll func()
	if d.cl, closeAll, err = d.cfg.openCluster(ctx); err != nil {
		return topology.Topology{}, err
	}
	d.onExit(closeAll)
	var members []string
	for i := 1; i <= d.o.shards; i++ {
		members = append(members, "shard"+strconv.Itoa(i))
	}
	if err := topology.Migrate(ctx, d.cl.Pool); err != nil {
		return topology.Topology{}, fmt.Errorf("create the topology schema in the control DB: %w", err)
	}
	res, err := register.Init(ctx, d.cl.Store, d.cl.Pool, d.cfg.openShardPools, register.InitOptions{Keyspace: topology.DefaultKeyspace, DSNs: d.cfg.Shards,
		Members: members, Ring: ring.Options{VNodes: 16, Tokens: ring.AllocBalanced}})
	if err != nil {
		return topology.Topology{}, registerErr(err)
	}
	topo := res.Topology
	if topo.Version != 1 || topo.Ring.HasShard(d.newShard) || len(topo.Ring.Shards()) != d.o.shards {
		return topo, usageError{fmt.Errorf("the cluster in %s already ran a demo (topology v%d: %s): start afresh with reshard dev destroy --state-dir %s, or use another --state-dir",
			d.opts.stateDir, topo.Version, strings.Join(topo.Ring.Shards(), ", "), d.opts.stateDir)}
	}
	return topo, nil
}

// data creates the demo's tables and loads its users and orders.
func (d *demoRun) data(ctx context.Context, topo topology.Topology) (int64, error) {
	if err := demo.CreateSchema(ctx, d.cl.Shards); err != nil {
		return 0, err
	}
	d.say("loading %d users, %d orders each, payloads of %d bytes (TOAST) for one user in ten", d.o.users, d.o.ordersPerUser, d.o.payloadBytes)
	t0 := time.Now()
	rows, err := demo.Load(ctx, d.cl.Shards, topo.Ring, demo.LoadOptions{Users: d.o.users, OrdersPerUser: d.o.ordersPerUser, PayloadBytes: d.o.payloadBytes, SkipIfNotEmpty: true})
	if err != nil {
		return 0, err
	}
	d.say("loaded %d rows in %s", rows, time.Since(t0).Round(100*time.Millisecond))
	return rows, nil
}

// register registers the demo's tables in the default keyspace.
func (d *demoRun) register(ctx context.Context) error {
	spec, err := parseTableSpec([]string{"users:id", "orders:user_id"}, topology.DefaultKeyspace)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := registerKeyspace(ctx, d.cfg, d.cl.Control, topology.DefaultKeyspace, spec); err != nil {
		return err
	}
	d.say("keyspace %s: users and orders registered (every row checked on its owner) and every shard fenced where it owns nothing, in %s",
		topology.DefaultKeyspace, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// worker runs a worker in this process and waits until Temporal lists it
// as polling: before, the migration's start would warn that no worker
// runs it.
func (d *demoRun) worker(ctx context.Context) error {
	wctx, stopWorker := context.WithCancel(ctx)
	wopts := *d.opts
	// The demo prints its own progress; the SDK logs every cancelled stream
	// (the CDC activity is cancelled at each cutover) as an error.
	wopts.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	if d.o.listen == "" {
		d.o.listen = cmp.Or(d.cfg.Listen, "127.0.0.1:9464")
	}
	d.workerExited = make(chan struct{})
	go func() {
		defer close(d.workerExited)
		d.workerErr = runWorker(wctx, &wopts, d.cfg, workerFlags{listen: d.o.listen})
	}()
	d.onExit(func() {
		stopWorker()
		<-d.workerExited
	})
	var err error
	if d.tc, err = d.cfg.dialTemporal(ctx, d.opts); err != nil {
		return err
	}
	d.onExit(d.tc.Close)
	for {
		polls, err := workerRuns(ctx, d.tc, d.cfg)
		if err != nil {
			return err
		}
		if polls {
			break
		}
		select {
		case <-d.workerExited:
			return d.workerStopped()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	d.say("worker started (metrics on http://%s/metrics)", d.o.listen)
	return nil
}

// writers starts the writers through the router, each write acknowledged
// in the ledger.
func (d *demoRun) writers(ctx context.Context) (*demo.Writers, error) {
	w, err := demo.StartWriters(ctx, d.cl.Store, d.cl.Shards, demo.WritersOptions{Users: d.o.users, Keys: d.o.ledgerKeys, Workers: d.o.writers, Seed: uint64(d.start.UnixNano())})
	if err != nil {
		return nil, err
	}
	d.onExit(w.Close)
	d.say("%d writers updating and deleting %d users through the router", d.o.writers, w.Keys())
	return w, nil
}

// addNode plans and starts the migration that adds the spare shard.
func (d *demoRun) addNode(ctx context.Context, topo topology.Topology) (*migrationPlan, error) {
	// No --table: a migration moves the keyspace's tables.
	req, err := request.Build(workflows.KindAddNode, []string{d.newShard}, request.Options{VNodes: workflows.DefaultVNodes, Tokens: workflows.DefaultTokens,
		Grace: d.o.grace, CutoverBudget: workflows.DefaultCutoverBudget, MaxLagBytes: workflows.DefaultMaxLagBytes, ChunkRows: workflows.DefaultCopyChunkRows,
		VerifyChunkRows: workflows.DefaultVerifyChunkRows, RowsPerSec: d.o.rowsPerSec, OnVerifyFail: string(workflows.VerifyFailWait)})
	if err != nil {
		return nil, usageError{err}
	}
	if req.Keyspace, req.Tables, _, err = migrationKeyspace(ctx, d.cl.Store, topology.DefaultKeyspace, req.Tables); err != nil {
		return nil, err
	}
	reg, err := plan.Registry(ctx, d.cl.Store)
	if err != nil {
		return nil, controlErr(err)
	}
	p, err := planMigration(d.cfg, topo, reg, req)
	if err != nil {
		return nil, err
	}
	startCmd := &cobra.Command{}
	startCmd.SetOut(d.out)
	return p, startMigration(ctx, startCmd, d.opts, d.cfg, p, false)
}

// follow prints the migration's progress until it ends, watching its lag
// and copy ETAs, and returns the summary's figures so far.
func (d *demoRun) follow(ctx context.Context, p *migrationPlan) (demo.Summary, error) {
	wfID := workflows.MigrationWorkflowID(p.Request.ID)
	sum := demo.Summary{Moved: p.Moved, Modulo: p.Modulo, Ideal: p.Ideal, ETAs: map[string]*demo.ETACheck{}}
	deadline := time.Now().Add(d.o.timeout)
	last := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return sum, ctx.Err()
		case <-d.workerExited:
			return sum, d.workerStopped()
		case <-time.After(time.Second):
		}
		if s, err := queryState(ctx, d.tc, wfID, 10*time.Second); err == nil {
			sum.State = s
			statusview.PrintChanges(d.out, s, last, time.Now())
			for _, m := range s.Moves {
				sum.PeakLag = max(sum.PeakLag, m.LagBytes)
				if sum.ETAs[m.Spec.ID] == nil {
					sum.ETAs[m.Spec.ID] = &demo.ETACheck{}
				}
				sum.ETAs[m.Spec.ID].Observe(m, time.Now())
			}
		}
		desc, derr := d.tc.DescribeWorkflowExecution(ctx, wfID, "")
		if derr == nil && desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if s, err := queryState(ctx, d.tc, wfID, 10*time.Second); err == nil {
				sum.State = s
			}
			if desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				return sum, fmt.Errorf("migration %s ended %s (%s): see %s", p.Request.ID, control.StatusText(desc.WorkflowExecutionInfo.Status), sum.State.Error, d.cfg.uiLink(wfID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()))
			}
			return sum, nil
		}
		if time.Now().After(deadline) {
			return sum, fmt.Errorf("migration %s did not end within --timeout %s: see %s", p.Request.ID, d.o.timeout, d.cfg.uiLink(wfID, runIDOf(ctx, d.tc, wfID)))
		}
	}
}

// check stops the writers, then checks every acknowledged key and every
// row's placement, and prints the summary.
func (d *demoRun) check(ctx context.Context, w *demo.Writers, sum demo.Summary) error {
	if err := w.Check(ctx, d.cl.Shards, &sum); err != nil {
		return err
	}
	sum.Print(d.out)
	if d.o.keep {
		fmt.Fprintf(d.out, "\nThe cluster and Temporal keep running (--keep): UI %s; reshard dev status --state-dir %[2]s, reshard dev psql %[3]s --state-dir %[2]s; stop with reshard dev down --state-dir %[2]s.\n", d.cfg.Temporal.UI, d.opts.stateDir, d.newShard)
	}
	if len(sum.Mismatches) > 0 || !sum.Placement.OK() {
		return fmt.Errorf("the demo found %d acknowledged writes not on their owner and %d misplaced rows", len(sum.Mismatches), demo.SumValues(sum.Placement.Misplaced))
	}
	return nil
}
