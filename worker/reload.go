package worker

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/reshard/reshard/activities"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// ConfigPoll is how often a worker looks at its configuration file.
const ConfigPoll = 2 * time.Second

// watchConfig reloads the worker's configuration when its file changes
// (checked every poll) or on SIGHUP: shards added (reshard dev up --shards
// 6, an operator's edit) are usable at once and a changed DSN or password
// reconnects, without a restart. A file that does not load is logged and
// the configuration in force kept. The control database and Temporal are
// read at start only: a change to them is logged as needing a restart.
// After a reload it asks for a report at once (reportNow), so that the CLI
// sees the new shards without waiting for the next periodic report.
func watchConfig(ctx context.Context, log *slog.Logger, cfg Config, reload func() (Config, error), acts *activities.Activities, poll time.Duration, reportNow chan<- struct{}) {
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
		if reload == nil {
			continue
		}
		next, err := reload()
		if err != nil {
			log.Warn("configuration not reloaded; the one in force is kept", "config", cfg.Path, "error", err)
			continue
		}
		added := acts.Reload(next.Shards, next.Password)
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

// identity names this worker in reshard.workers: host, pid and a random
// suffix (one process may run several workers, as tests do).
func identity() string {
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
