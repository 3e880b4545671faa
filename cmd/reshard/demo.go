package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/demo"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/keyspace/register"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

func newDemoCmd(opts *globalOptions) *cobra.Command {
	var o demo.Options
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
			if o.Shards < 1 || o.Users < 1 || o.Writers < 1 || o.LedgerKeys < 1 || o.OrdersPerUser < 0 || o.PayloadBytes < 0 {
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
				o.Listen = "" // the free port dev up writes to the demo's reshard.yaml
			}
			o.StateDir = opts.stateDir
			err := demo.Run(ctx, cmd.OutOrStdout(), &demoEnv{opts: opts}, o)
			if errors.As(err, new(*demo.InputError)) {
				return usageError{err}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Shards, "shards", 4, "shards before the migration (one more server is started as the new shard)")
	f.Int64Var(&o.Users, "users", 1_000_000, "users to load (orders and payloads scale with it)")
	f.IntVar(&o.OrdersPerUser, "orders-per-user", 2, "orders per user")
	f.IntVar(&o.PayloadBytes, "payload-bytes", 3000, "size of the TOASTed users.payload of one user in ten")
	f.IntVar(&o.Writers, "writers", 8, "concurrent writers through the router")
	f.IntVar(&o.LedgerKeys, "ledger-keys", 20_000, "users the writers update and delete (each write acknowledged in the ledger)")
	f.DurationVar(&o.Grace, "grace", 15*time.Second, "GRACE period before cleanup")
	f.Float64Var(&o.RowsPerSec, "rows-per-sec", 0, "copy throttle per move (0: unlimited)")
	f.BoolVar(&o.Keep, "keep", false, "leave the cluster, Temporal and its UI running afterwards (default: the demo removes its cluster at the end)")
	f.StringVar(&o.Listen, "listen", "", "the worker's /metrics and /healthz address (default: a free loopback port, worker.listen of the demo's reshard.yaml)")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "give up when the migration has not ended by then")
	return cmd
}

// demoEnv is the demo's cluster as the CLI's configuration opens it
// (demo.Env): every step runs as the command that does it alone.
type demoEnv struct {
	opts *globalOptions
	cfg  *clusterConfig
}

func (e *demoEnv) Load(path string) (c demo.Config, err error) {
	if e.cfg, err = (&configFlags{path: path}).load(e.opts); err != nil {
		return c, err
	}
	return demo.Config{UI: e.cfg.Temporal.UI, Namespace: e.cfg.Temporal.Namespace, Listen: e.cfg.Listen}, nil
}

func (e *demoEnv) Open(ctx context.Context) (demo.Cluster, func(), error) {
	cl, closeAll, err := e.cfg.openCluster(ctx)
	return demo.Cluster{Control: cl.Control, Shards: cl.Shards}, closeAll, err
}

func (e *demoEnv) Init(ctx context.Context, cl demo.Cluster, keyspace string, members []string) (topology.Topology, error) {
	res, err := register.Init(ctx, cl.Store, cl.Pool, e.cfg.openShardPools, register.InitOptions{Keyspace: keyspace, DSNs: e.cfg.Shards,
		Members: members, Ring: ring.Options{VNodes: 16, Tokens: ring.AllocBalanced}})
	return res.Topology, registerErr(err)
}

func (e *demoEnv) Register(ctx context.Context, ctl fence.Control, name string, spec tableset.Spec) error {
	_, err := registerKeyspace(ctx, e.cfg, ctl, name, spec)
	return err
}

// RunWorker runs the worker with errors only in its log: the demo prints
// its own progress, and the SDK logs every cancelled stream (the CDC
// activity is cancelled at each cutover) as an error.
func (e *demoEnv) RunWorker(ctx context.Context, listen string) error {
	wopts := *e.opts
	wopts.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	return runWorker(ctx, &wopts, e.cfg, workerFlags{listen: listen})
}

func (e *demoEnv) Dial(ctx context.Context) (client.Client, error) {
	return e.cfg.dialTemporal(ctx, e.opts)
}

func (e *demoEnv) WorkerRuns(ctx context.Context, tc client.Client) (bool, error) {
	return workerRuns(ctx, tc, e.cfg)
}

func (e *demoEnv) Plan(ctx context.Context, store *topology.Store, req workflows.MigrationRequest) (*migrationPlan, error) {
	p, _, _, err := planRequest(ctx, e.cfg, store, topology.DefaultKeyspace, req)
	return p, err
}

func (e *demoEnv) Start(ctx context.Context, out io.Writer, p *migrationPlan) error {
	startCmd := &cobra.Command{}
	startCmd.SetOut(out)
	return startMigration(ctx, startCmd, e.opts, e.cfg, p, false)
}

func (e *demoEnv) State(ctx context.Context, tc client.Client, wfID string) (workflows.MigrationState, error) {
	return queryState(ctx, tc, wfID, 10*time.Second)
}

func (e *demoEnv) UILink(wfID, runID string) string { return e.cfg.uiLink(wfID, runID) }
