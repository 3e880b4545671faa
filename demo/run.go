package demo

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/planview"
	"github.com/reshard/reshard/request"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// Options are reshard demo's: the cluster, the data, the writers and the
// migration.
type Options struct {
	StateDir      string // the demo's own cluster
	Shards        int    // before the migration; one more server joins
	Users         int64
	OrdersPerUser int
	PayloadBytes  int
	Writers       int
	LedgerKeys    int
	Grace         time.Duration
	RowsPerSec    float64
	Keep          bool   // leave the cluster running afterwards
	Listen        string // the worker's endpoint ("": the configuration's)
	Timeout       time.Duration
}

// Cluster is the control database and every shard, open for the demo's
// whole run.
type Cluster struct {
	fence.Control
	Shards map[string]*pgxpool.Pool
}

// Config is what the demo reads of the configuration: the Temporal UI's
// address and namespace, the worker's endpoint ("" for none).
type Config struct{ UI, Namespace, Listen string }

// Env is what the demo takes from the CLI: the configuration dev up wrote
// (Load), opened, registered, planned, started and followed as every
// command does it, with the CLI's errors and exit codes.
type Env interface {
	// Load reads the configuration at path.
	Load(path string) (Config, error)
	Open(ctx context.Context) (Cluster, func(), error)
	// Init publishes the first topology of keyspace over members.
	Init(ctx context.Context, cl Cluster, keyspace string, members []string) (topology.Topology, error)
	// Register registers spec's tables in keyspace name and fences them.
	Register(ctx context.Context, ctl fence.Control, name string, spec keyspace.Spec) error
	// RunWorker runs a worker until ctx ends, logging errors only.
	RunWorker(ctx context.Context, listen string) error
	Dial(ctx context.Context) (client.Client, error)
	WorkerRuns(ctx context.Context, tc client.Client) (bool, error)
	// Plan is the plan of req (its keyspace and tables resolved) on the
	// keyspace's current topology.
	Plan(ctx context.Context, store *topology.Store, req workflows.MigrationRequest) (*planview.Plan, error)
	// Start starts the migration of a checked plan, printing to out.
	Start(ctx context.Context, out io.Writer, p *planview.Plan) error
	// State is a migration's state with its live figures.
	State(ctx context.Context, tc client.Client, wfID string) (workflows.MigrationState, error)
	UILink(wfID, runID string) string
}

// run is one run of the demo: what its steps share, and the cleanups
// they registered (run last first when the demo ends).
type run struct {
	out      io.Writer
	env      Env
	cfg      Config
	o        Options
	start    time.Time
	newShard string
	cl       Cluster
	tc       client.Client
	cleanups []func()

	workerExited chan struct{}
	workerErr    error
}

func (d *run) say(format string, args ...any) {
	fmt.Fprintf(d.out, "%s  "+format+"\n", append([]any{time.Since(d.start).Round(time.Second)}, args...)...)
}

func (d *run) onExit(f func()) { d.cleanups = append(d.cleanups, f) }

// workerStopped is the error of a worker that exited before the demo ended.
func (d *run) workerStopped() error { return fmt.Errorf("the worker stopped: %v", d.workerErr) }

// Run is reshard demo: a local cluster under live writes gains a shard
// (add-node to the end), then every acknowledged write and every row's
// placement is checked, and the summary printed on out.
func Run(ctx context.Context, out io.Writer, env Env, o Options) error {
	d := &run{out: out, env: env, o: o, start: time.Now(), newShard: "shard" + strconv.Itoa(o.Shards+1)}
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
	p, err := d.addNode(ctx)
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
func (d *run) cluster(ctx context.Context) (topology.Topology, error) {
	d.say("starting the local cluster in %s: control DB, %d shards + %s (spare), Temporal", d.o.StateDir, d.o.Shards, d.newShard)
	cl, err := devenv.Up(ctx, devenv.Options{StateDir: d.o.StateDir, Shards: d.o.Shards + 1})
	if err != nil {
		return topology.Topology{}, err
	}
	if !d.o.Keep {
		// Without --keep the demo removes its cluster, so the next run starts
		// afresh.
		d.onExit(func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			if err := devenv.Destroy(dctx, d.o.StateDir); err != nil {
				fmt.Fprintln(os.Stderr, "reshard demo: removing the demo cluster:", err)
			}
		})
	}
	if d.cfg, err = d.env.Load(cl.ConfigPath()); err != nil {
		return topology.Topology{}, err
	}
	d.say("Temporal UI: %s/namespaces/%s/workflows", d.cfg.UI, d.cfg.Namespace)
	var closeAll func()
	if d.cl, closeAll, err = d.env.Open(ctx); err != nil {
		return topology.Topology{}, err
	}
	d.onExit(closeAll)
	var members []string
	for i := 1; i <= d.o.Shards; i++ {
		members = append(members, "shard"+strconv.Itoa(i))
	}
	if err := topology.Migrate(ctx, d.cl.Pool); err != nil {
		return topology.Topology{}, fmt.Errorf("create the topology schema in the control DB: %w", err)
	}
	topo, err := d.env.Init(ctx, d.cl, topology.DefaultKeyspace, members)
	if err != nil {
		return topology.Topology{}, err
	}
	if topo.Version != 1 || topo.Ring.HasShard(d.newShard) || len(topo.Ring.Shards()) != d.o.Shards {
		return topo, &InputError{fmt.Sprintf("the cluster in %s already ran a demo (topology v%d: %s): start afresh with reshard dev destroy --state-dir %s, or use another --state-dir",
			d.o.StateDir, topo.Version, strings.Join(topo.Ring.Shards(), ", "), d.o.StateDir)}
	}
	return topo, nil
}

// InputError is a demo refused: its cluster is not one it can run on.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// data creates the demo's tables and loads its users and orders.
func (d *run) data(ctx context.Context, topo topology.Topology) (int64, error) {
	if err := CreateSchema(ctx, d.cl.Shards); err != nil {
		return 0, err
	}
	d.say("loading %d users, %d orders each, payloads of %d bytes (TOAST) for one user in ten", d.o.Users, d.o.OrdersPerUser, d.o.PayloadBytes)
	t0 := time.Now()
	rows, err := Load(ctx, d.cl.Shards, topo.Ring, LoadOptions{Users: d.o.Users, OrdersPerUser: d.o.OrdersPerUser, PayloadBytes: d.o.PayloadBytes, SkipIfNotEmpty: true})
	if err != nil {
		return 0, err
	}
	d.say("loaded %d rows in %s", rows, time.Since(t0).Round(100*time.Millisecond))
	return rows, nil
}

// register registers the demo's tables in the default keyspace.
func (d *run) register(ctx context.Context) error {
	spec, err := request.Tables([]string{"users:id", "orders:user_id"}, topology.DefaultKeyspace)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.env.Register(ctx, d.cl.Control, topology.DefaultKeyspace, spec); err != nil {
		return err
	}
	d.say("keyspace %s: users and orders registered (every row checked on its owner) and every shard fenced where it owns nothing, in %s",
		topology.DefaultKeyspace, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// worker runs a worker in this process and waits until Temporal lists it
// as polling: before, the migration's start would warn that no worker
// runs it.
func (d *run) worker(ctx context.Context) error {
	wctx, stopWorker := context.WithCancel(ctx)
	if d.o.Listen == "" {
		d.o.Listen = cmp.Or(d.cfg.Listen, "127.0.0.1:9464")
	}
	d.workerExited = make(chan struct{})
	go func() {
		defer close(d.workerExited)
		d.workerErr = d.env.RunWorker(wctx, d.o.Listen)
	}()
	d.onExit(func() {
		stopWorker()
		<-d.workerExited
	})
	var err error
	if d.tc, err = d.env.Dial(ctx); err != nil {
		return err
	}
	d.onExit(d.tc.Close)
	for {
		polls, err := d.env.WorkerRuns(ctx, d.tc)
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
	d.say("worker started (metrics on http://%s/metrics)", d.o.Listen)
	return nil
}

// writers starts the writers through the router, each write acknowledged
// in the ledger.
func (d *run) writers(ctx context.Context) (*Writers, error) {
	w, err := StartWriters(ctx, d.cl.Store, d.cl.Shards, WritersOptions{Users: d.o.Users, Keys: d.o.LedgerKeys, Workers: d.o.Writers, Seed: uint64(d.start.UnixNano())})
	if err != nil {
		return nil, err
	}
	d.onExit(w.Close)
	d.say("%d writers updating and deleting %d users through the router", d.o.Writers, w.Keys())
	return w, nil
}

// addNode plans and starts the migration that adds the spare shard.
func (d *run) addNode(ctx context.Context) (*planview.Plan, error) {
	// No --table: a migration moves the keyspace's tables.
	req, err := request.Build(workflows.KindAddNode, []string{d.newShard}, request.Options{VNodes: workflows.DefaultVNodes, Tokens: workflows.DefaultTokens,
		Grace: d.o.Grace, CutoverBudget: workflows.DefaultCutoverBudget, MaxLagBytes: workflows.DefaultMaxLagBytes, ChunkRows: workflows.DefaultCopyChunkRows,
		VerifyChunkRows: workflows.DefaultVerifyChunkRows, RowsPerSec: d.o.RowsPerSec, OnVerifyFail: string(workflows.VerifyFailWait)})
	if err != nil {
		return nil, &InputError{err.Error()}
	}
	p, err := d.env.Plan(ctx, d.cl.Store, req)
	if err != nil {
		return nil, err
	}
	return p, d.env.Start(ctx, d.out, p)
}

// follow prints the migration's progress until it ends, watching its lag
// and copy ETAs, and returns the summary's figures so far.
func (d *run) follow(ctx context.Context, p *planview.Plan) (Summary, error) {
	wfID := workflows.MigrationWorkflowID(p.Request.ID)
	sum := Summary{Moved: p.Moved, Modulo: p.Modulo, Ideal: p.Ideal, ETAs: map[string]*ETACheck{}}
	deadline := time.Now().Add(d.o.Timeout)
	last := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return sum, ctx.Err()
		case <-d.workerExited:
			return sum, d.workerStopped()
		case <-time.After(time.Second):
		}
		if s, err := d.env.State(ctx, d.tc, wfID); err == nil {
			sum.State = s
			statusview.PrintChanges(d.out, s, last, time.Now())
			for _, m := range s.Moves {
				sum.PeakLag = max(sum.PeakLag, m.LagBytes)
				if sum.ETAs[m.Spec.ID] == nil {
					sum.ETAs[m.Spec.ID] = &ETACheck{}
				}
				sum.ETAs[m.Spec.ID].Observe(m, time.Now())
			}
		}
		desc, derr := d.tc.DescribeWorkflowExecution(ctx, wfID, "")
		if derr == nil && desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if s, err := d.env.State(ctx, d.tc, wfID); err == nil {
				sum.State = s
			}
			if desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				return sum, fmt.Errorf("migration %s ended %s (%s): see %s", p.Request.ID, control.StatusText(desc.WorkflowExecutionInfo.Status), sum.State.Error,
					d.env.UILink(wfID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()))
			}
			return sum, nil
		}
		if time.Now().After(deadline) {
			return sum, fmt.Errorf("migration %s did not end within --timeout %s: see %s", p.Request.ID, d.o.Timeout, d.env.UILink(wfID, control.RunID(ctx, d.tc, wfID)))
		}
	}
}

// check stops the writers, then checks every acknowledged key and every
// row's placement, and prints the summary.
func (d *run) check(ctx context.Context, w *Writers, sum Summary) error {
	if err := w.Check(ctx, d.cl.Shards, &sum); err != nil {
		return err
	}
	sum.Print(d.out)
	if d.o.Keep {
		fmt.Fprintf(d.out, "\nThe cluster and Temporal keep running (--keep): UI %s; reshard dev status --state-dir %[2]s, reshard dev psql %[3]s --state-dir %[2]s; stop with reshard dev down --state-dir %[2]s.\n", d.cfg.UI, d.o.StateDir, d.newShard)
	}
	if len(sum.Mismatches) > 0 || !sum.Placement.OK() {
		return fmt.Errorf("the demo found %d acknowledged writes not on their owner and %d misplaced rows", len(sum.Mismatches), SumValues(sum.Placement.Misplaced))
	}
	return nil
}
