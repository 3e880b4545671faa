package main

import (
	"context"
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/worker"
	"github.com/reshard/reshard/workflows"
)

func newWorkerCmd(opts *globalOptions) *cobra.Command {
	var (
		cf         configFlags
		listen     string
		sqlCatchUp int64
		walWindow  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a reshard worker: Temporal workflows and activities, /metrics and /healthz",
		Long: `Run a reshard worker. It polls the "` + workflows.TaskQueue + `" task queue of the configured
Temporal namespace, runs the Migration and Move workflows and their activities
(shard names are resolved to DSNs from the configuration; passwords come from
$` + PasswordEnvVar + `, password_env or password_file), and serves Prometheus metrics on
/metrics and health checks: /livez (the worker runs), /healthz and /readyz
(the worker runs and the control database and Temporal answer; 503 naming
what fails).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cf.load(opts)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if sqlCatchUp < 0 {
				return fmt.Errorf("--cdc-sql-catch-up-bytes %d: give a lag in bytes, or 0 to catch up through the walsender only", sqlCatchUp)
			}
			if !cmd.Flags().Changed("listen") && cfg.Listen != "" {
				listen = cfg.Listen // worker.listen of the configuration
			}
			wf := workerFlags{listen: listen, sqlCatchUp: sqlCatchUp, walWindow: walWindow}
			if sqlCatchUp == 0 {
				wf.sqlCatchUp = -1 // off
			}
			return runWorker(ctx, opts, cfg, wf)
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9464", "address of the /metrics, /livez, /healthz and /readyz HTTP endpoint (default: worker.listen of the configuration, else 127.0.0.1:9464)")
	cmd.Flags().Int64Var(&sqlCatchUp, "cdc-sql-catch-up-bytes", cdc.DefaultPeekCatchUpBytes,
		"a move's CDC further behind its source than this many bytes of WAL catches up by SQL peeks of its slot, several times faster than a walsender streams small transactions (0: walsender only)")
	cmd.Flags().DurationVar(&walWindow, "wal-window", capacity.DefaultWALWindow, "how long PLAN's capacity probe watches each shard's WAL rate")
	return cmd
}

// workerFlags are the worker's own flags.
type workerFlags struct {
	listen     string
	sqlCatchUp int64 // --cdc-sql-catch-up-bytes (activities.SQLCatchUpBytes: 0 default, negative off)
	walWindow  time.Duration
}

// runWorker runs the worker of cfg (package worker) until ctx ends; it
// reloads the configuration from cfg.Path as every command reads it.
func runWorker(ctx context.Context, opts *globalOptions, cfg *clusterConfig, wf workerFlags) error {
	err := worker.Run(ctx, cfg.worker(), worker.Options{Listen: wf.listen, SQLCatchUpBytes: wf.sqlCatchUp, WALWindow: wf.walWindow, Logger: opts.logger,
		Reload: func() (worker.Config, error) {
			next, err := (&configFlags{path: cfg.Path}).load(opts)
			if err != nil {
				return worker.Config{}, err
			}
			return next.worker(), nil
		}})
	return inputErr(err)
}

// worker is the configuration as package worker takes it.
func (c *clusterConfig) worker() worker.Config {
	return worker.Config{Path: c.Path, Control: c.Control, Shards: c.Shards, Standbys: c.Standbys, Password: c.password,
		Temporal: worker.Temporal{Address: c.Temporal.Address, Namespace: c.Temporal.Namespace, UI: c.Temporal.UI}, Capacity: c.Capacity}
}

// configPoll is how often a worker looks at its configuration file.
const configPoll = worker.ConfigPoll
