package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/reshard/reshard/activities"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/topology"
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

// healthChecks probes what a worker needs: its worker loop, the control
// database and the Temporal frontend, each within two seconds. The lines
// name each check ("control database: ok" or its error, never a password).
func healthChecks(ctx context.Context, running bool, control *topology.Store, tc client.Client) ([]string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ok := true
	line := func(what string, err error) string {
		if err != nil {
			ok = false
			return what + ": " + err.Error()
		}
		return what + ": ok"
	}
	var lines []string
	if running {
		lines = append(lines, line("worker", nil))
	} else {
		lines = append(lines, line("worker", errors.New("not running")))
	}
	lines = append(lines, line("control database", control.Ping(ctx)))
	_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
	lines = append(lines, line("temporal", err))
	if ok {
		lines = append([]string{"ok"}, lines...)
	}
	return lines, ok
}

// workerFlags are the worker's own flags.
type workerFlags struct {
	listen     string
	sqlCatchUp int64 // --cdc-sql-catch-up-bytes (activities.SQLCatchUpBytes: 0 default, negative off)
	walWindow  time.Duration
}

func runWorker(ctx context.Context, opts *globalOptions, cfg *clusterConfig, wf workerFlags) error {
	listen := wf.listen
	log := opts.logger
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	acts := activities.New(&activities.Resolver{Control: cfg.Control, Shards: cfg.Shards, Password: cfg.password}, log, activities.NewMetrics(reg))
	acts.SQLCatchUpBytes = wf.sqlCatchUp
	acts.CapacityWALWindow = wf.walWindow
	acts.SetBudgets(cfg.Capacity)
	acts.SetStandbys(cfg.Standbys)
	reg.MustRegister(acts.ControlCollector())
	defer acts.Close()

	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	tc, err := client.DialContext(dctx, client.Options{
		HostPort: cfg.Temporal.Address, Namespace: cfg.Temporal.Namespace,
		Logger: sdklog.NewStructuredLogger(log), MetricsHandler: newPhaseMetricsHandler(reg),
	})
	cancel()
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s (namespace %s): %w; is it running? (reshard dev status)", cfg.Temporal.Address, cfg.Temporal.Namespace, err)
	}
	defer tc.Close()
	acts.LiveThrottle = func(ctx context.Context, workflowID string) (workflows.Throttle, error) {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var t workflows.Throttle
		v, err := tc.QueryWorkflow(qctx, workflowID, "", workflows.QueryThrottle)
		if err == nil {
			err = v.Get(&t)
		}
		return t, err
	}

	// An activity learns that the workflow cancelled it (a phase is over, a
	// rollback) from the answer to a heartbeat, and the SDK holds heartbeats
	// back for 80 % of the heartbeat timeout: 24s with the default 30s, which
	// is how long a CUTOVER phase waited for its CDC stream to stop. The
	// CDC streams heartbeat every second; send each at once.
	w := worker.New(tc, workflows.TaskQueue, worker.Options{EnableSessionWorker: true, MaxHeartbeatThrottleInterval: time.Second})
	workflows.Register(w)
	acts.Register(func(fn any, name string) { w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) })

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return usageError{fmt.Errorf("--listen %s: %w", listen, err)}
	}
	var running atomic.Bool
	// The health check's own pool: two connections, opened on first use, so
	// a probe never waits behind the activities' work (the move-state
	// gauges read the control database through it at scrape time).
	control, closeControl, err := cfg.smallControl(ctx, 2)
	if err != nil {
		return err
	}
	defer closeControl()
	reg.MustRegister(newMoveStateCollector(tc, control))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// /livez: the process runs its worker (restart it if not). /healthz and
	// /readyz: it can also do its work, the control database and Temporal
	// answering; each failing dependency is named.
	mux.HandleFunc("/livez", func(rw http.ResponseWriter, _ *http.Request) {
		if !running.Load() {
			http.Error(rw, "worker not running", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ok")
	})
	health := func(rw http.ResponseWriter, r *http.Request) {
		lines, ok := healthChecks(r.Context(), running.Load(), control, tc)
		if !ok {
			rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(rw, strings.Join(lines, "\n")+"\n")
	}
	mux.HandleFunc("/healthz", health)
	mux.HandleFunc("/readyz", health)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-srvErr
	}()

	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	running.Store(true)
	log.Info("worker running", "task_queue", workflows.TaskQueue, "temporal", cfg.Temporal.Address, "namespace", cfg.Temporal.Namespace,
		"shards", len(cfg.Shards), "listen", ln.Addr().String())
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	reportNow := make(chan struct{}, 1)
	go watchConfig(bg, opts, cfg, acts, configPoll, reportNow)
	reported := make(chan struct{})
	go func() { defer close(reported); reportWorker(bg, log, control, workerIdentity(), acts, reportNow) }()
	defer func() { stopBG(); <-reported }()
	select {
	case <-ctx.Done():
	case err := <-srvErr:
		srvErr <- err
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "error", err)
		}
	}
	running.Store(false)
	w.Stop()
	log.Info("worker stopped")
	return nil
}

// configPoll is how often a worker looks at its configuration file.
const configPoll = 2 * time.Second

// watchConfig reloads the worker's configuration when its file changes
// (checked every poll) or on SIGHUP: shards added (reshard dev up --shards
// 6, an operator's edit) are usable at once and a changed DSN or password
// reconnects, without a restart. A file that does not load is logged and
// the configuration in force kept. The control database and Temporal are
// read at start only: a change to them is logged as needing a restart.
// After a reload it asks for a report at once (reportNow), so that the CLI
// sees the new shards without waiting for the next periodic report.
func watchConfig(ctx context.Context, opts *globalOptions, cfg *clusterConfig, acts *activities.Activities, poll time.Duration, reportNow chan<- struct{}) {
	log := opts.logger
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	stamp := func() string {
		fi, err := os.Stat(cfg.Path)
		if err != nil {
			return ""
		}
		return fmt.Sprint(fi.ModTime().UnixNano(), fi.Size())
	}
	last := stamp()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if s := stamp(); s == last {
				continue
			} else {
				last = s
			}
		case <-hup:
			last = stamp()
		}
		next, err := (&configFlags{path: cfg.Path}).load(opts)
		if err != nil {
			log.Warn("configuration not reloaded; the one in force is kept", "config", cfg.Path, "error", err)
			continue
		}
		added := acts.Reload(next.Shards, next.password)
		acts.SetBudgets(next.Capacity)
		acts.SetStandbys(next.Standbys)
		log.Info("configuration reloaded", "config", cfg.Path, "shards", len(next.Shards), "added", added)
		select {
		case reportNow <- struct{}{}:
		default: // a report is already asked for
		}
		if next.Control != cfg.Control || next.Temporal != cfg.Temporal {
			log.Warn("the control database or Temporal changed in the configuration: restart the worker to use them", "config", cfg.Path)
		}
	}
}

// workerIdentity names this worker in reshard.workers: host, pid and a
// random suffix (one process may run several workers, as tests do).
func workerIdentity() string {
	host, _ := os.Hostname()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%x", host, os.Getpid(), b)
}

// reportWorker keeps this worker's row in reshard.workers (the shards its
// configuration knows) fresh until ctx ends, then removes it: the CLI
// refuses a migration whose shards no running worker knows. A receive on
// now reports at once (after a configuration reload).
func reportWorker(ctx context.Context, log *slog.Logger, store *topology.Store, identity string, acts *activities.Activities, now <-chan struct{}) {
	migrated := false
	tick := time.NewTicker(topology.WorkerReportEvery)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if !migrated {
			migrated = store.Migrate(rctx) == nil
		}
		if migrated {
			if err := store.ReportWorker(rctx, topology.Worker{Identity: identity, TaskQueue: workflows.TaskQueue, Shards: acts.Shards()}); err != nil && ctx.Err() == nil {
				log.Warn("report this worker in the control database", "error", err)
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_ = store.ForgetWorker(fctx, identity)
			cancel()
			return
		case <-tick.C:
		case <-now:
		}
	}
}
