package topology

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Worker is a running worker as it last reported itself: the shard names
// its configuration holds (names only: never a DSN).
type Worker struct {
	Identity  string
	TaskQueue string
	Shards    []string
	SeenAt    time.Time
}

// WorkerFresh is how recent a worker's report must be for it to count as
// running: workers report every WorkerReportEvery.
const (
	WorkerReportEvery = 5 * time.Second
	WorkerFresh       = 15 * time.Second
)

// ReportWorker records (or refreshes) a running worker.
func (s *Store) ReportWorker(ctx context.Context, w Worker) error {
	shards := slices.Clone(w.Shards)
	slices.Sort(shards)
	if _, err := s.pool.Exec(ctx, `INSERT INTO reshard.workers (identity, task_queue, shards, seen_at) VALUES ($1, $2, $3, now())
ON CONFLICT (identity) DO UPDATE SET task_queue = EXCLUDED.task_queue, shards = EXCLUDED.shards, seen_at = now()`,
		w.Identity, w.TaskQueue, shards); err != nil {
		return fmt.Errorf("report worker %s: %w", w.Identity, err)
	}
	return nil
}

// ForgetWorker removes a worker that stops.
func (s *Store) ForgetWorker(ctx context.Context, identity string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM reshard.workers WHERE identity = $1`, identity); err != nil {
		return fmt.Errorf("forget worker %s: %w", identity, err)
	}
	return nil
}

// Workers lists the workers of taskQueue seen within WorkerFresh, and
// forgets those not seen for a day.
func (s *Store) Workers(ctx context.Context, taskQueue string) ([]Worker, error) {
	if _, err := s.pool.Exec(ctx, `DELETE FROM reshard.workers WHERE seen_at < now() - interval '1 day'`); err != nil {
		return nil, fmt.Errorf("read the running workers: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT identity, task_queue, shards, seen_at FROM reshard.workers
WHERE task_queue = $1 AND seen_at > now() - make_interval(secs => $2) ORDER BY identity`, taskQueue, WorkerFresh.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read the running workers: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Worker, error) {
		var w Worker
		err := r.Scan(&w.Identity, &w.TaskQueue, &w.Shards, &w.SeenAt)
		return w, err
	})
}

// UnknownToWorkers returns the shards of want that no worker of ws knows,
// in want's order.
func UnknownToWorkers(ws []Worker, want []string) []string {
	var missing []string
	for _, s := range want {
		known := false
		for _, w := range ws {
			if slices.Contains(w.Shards, s) {
				known = true
				break
			}
		}
		if !known && !slices.Contains(missing, s) {
			missing = append(missing, s)
		}
	}
	return missing
}
