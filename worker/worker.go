package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/reshard/reshard/activities"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/internal/promreg"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// Config is what a worker reads from its configuration file, validated:
// DSNs without a password, the password apart (it only ever reaches a
// connection config).
type Config struct {
	Path     string            // the configuration file, watched for changes
	Control  string            // the control database's DSN
	Shards   map[string]string // shard name → DSN
	Standbys map[string]string // shard name → its streaming standby's DSN
	Password string
	Temporal Temporal
	Capacity map[string]capacity.Budget // what each shard can spare
}

// Temporal is the frontend the worker polls (and its UI's address, which
// the worker does not use: a change of any of them needs a restart).
type Temporal struct {
	Address, Namespace, UI string
}

// Options are the worker's own settings (its flags).
type Options struct {
	Listen          string        // address of the HTTP endpoint
	SQLCatchUpBytes int64         // activities.SQLCatchUpBytes: 0 default, negative off
	WALWindow       time.Duration // PLAN's capacity probe
	Logger          *slog.Logger
	// Reload reads the configuration file again (the worker reloads it
	// when it changes, or on SIGHUP); its error keeps the one in force.
	Reload func() (Config, error)
}

// Run runs a worker until ctx ends: it polls workflows.TaskQueue and
// serves its HTTP endpoint. An address that cannot be listened on is an
// *pgerr.InputError.
func Run(ctx context.Context, cfg Config, o Options) error {
	log := o.Logger
	reg := prometheus.NewRegistry()
	promreg.Register(reg, collectors.NewGoCollector())
	promreg.Register(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	acts := activities.New(&activities.Resolver{Control: cfg.Control, Shards: cfg.Shards, Password: cfg.Password}, log, activities.NewMetrics(reg))
	acts.SQLCatchUpBytes = o.SQLCatchUpBytes
	acts.CapacityWALWindow = o.WALWindow
	acts.SetBudgets(cfg.Capacity)
	acts.SetStandbys(cfg.Standbys)
	promreg.Register(reg, acts.ControlCollector())
	defer acts.Close()

	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	tc, err := client.DialContext(dctx, client.Options{
		HostPort: cfg.Temporal.Address, Namespace: cfg.Temporal.Namespace,
		Logger: sdklog.NewStructuredLogger(log), MetricsHandler: NewPhaseMetricsHandler(reg),
	})
	cancel()
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s (namespace %s): %w; is it running? (reshard dev status)", cfg.Temporal.Address, cfg.Temporal.Namespace, err)
	}
	defer tc.Close()
	acts.LiveThrottle = liveThrottle(tc)

	// An activity learns that the workflow cancelled it (a phase is over, a
	// rollback) from the answer to a heartbeat, and the SDK holds heartbeats
	// back for 80 % of the heartbeat timeout: 24s with the default 30s, which
	// is how long a CUTOVER phase waited for its CDC stream to stop. The
	// CDC streams heartbeat every second; send each at once.
	w := sdkworker.New(tc, workflows.TaskQueue, sdkworker.Options{EnableSessionWorker: true, MaxHeartbeatThrottleInterval: time.Second})
	workflows.Register(w)
	acts.Register(func(fn any, name string) { w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) })

	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return pgerr.BadInput("--listen %s: %w", o.Listen, err)
	}
	var running atomic.Bool
	// The health check's own pool: two connections, opened on first use, so
	// a probe never waits behind the activities' work (the move-state
	// gauges read the control database through it at scrape time).
	control, closeControl, err := smallControl(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer closeControl()
	promreg.Register(reg, NewMoveStateCollector(tc, control))
	srv, srvErr := serve(ln, endpoint(reg, &running, control, tc))
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
	go watchConfig(bg, log, cfg, o.Reload, acts, ConfigPoll, reportNow)
	reported := make(chan struct{})
	go func() { defer close(reported); reportWorker(bg, log, control, identity(), acts, reportNow) }()
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

// liveThrottle asks a migration's workflow for its throttle as it is now.
func liveThrottle(tc client.Client) func(ctx context.Context, workflowID string) (workflows.Throttle, error) {
	return func(ctx context.Context, workflowID string) (workflows.Throttle, error) {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var t workflows.Throttle
		v, err := tc.QueryWorkflow(qctx, workflowID, "", workflows.QueryThrottle)
		if err == nil {
			err = v.Get(&t)
		}
		return t, err
	}
}

// smallControl is a store on a pool of at most n connections to the
// control database, opened on first use (never pinged here).
func smallControl(ctx context.Context, cfg Config, n int32) (*topology.Store, func(), error) {
	pcfg, err := pgsession.ParsePoolConfig(cfg.Control)
	if err != nil {
		return nil, nil, pgerr.BadInput("control: not a valid PostgreSQL connection string")
	}
	if cfg.Password != "" {
		pcfg.ConnConfig.Password = cfg.Password
	}
	pcfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("control database pool: %w", err)
	}
	return topology.NewStore(pool), pool.Close, nil
}

// endpoint is the worker's HTTP handler. /livez: the process runs its
// worker (restart it if not). /healthz and /readyz: it can also do its
// work, the control database and Temporal answering; each failing
// dependency is named.
func endpoint(reg *prometheus.Registry, running *atomic.Bool, control *topology.Store, tc client.Client) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
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
	return mux
}

// serve serves h on ln until the server is shut down; its end is sent on
// the channel.
func serve(ln net.Listener, h http.Handler) (*http.Server, chan error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	return srv, srvErr
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
