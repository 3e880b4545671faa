//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/workflows"
)

// appLoad is an application beside a migration: writers whose transactions
// update a user and its orders in either order (two registered tables, one
// key), long SELECTs on both tables, and a sampler of every shard's pg_locks.
// Its sessions are named app-*, so that a wait of one of them on a session
// that is not the application's is a wait on reshard.
type appLoad struct {
	pools  map[string]*pgxpool.Pool
	router *router.Router
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	errs     map[string]int // application errors by SQLSTATE ("" when none)
	examples map[string]string
	worst    lockWait      // the longest lock wait of an app session on a non-app session
	slowest  time.Duration // the longest writer transaction, for reference
	commits  atomic.Int64
	readers  atomic.Int64
}

type lockWait struct {
	wait                 time.Duration
	shard, lock, blocker string
}

func startAppLoad(t *testing.T, c *cluster) *appLoad {
	ctx, cancel := context.WithCancel(context.Background())
	a := &appLoad{pools: map[string]*pgxpool.Pool{}, cancel: cancel, errs: map[string]int{}, examples: map[string]string{}}
	for name, db := range c.dbs {
		cfg, err := pgxpool.ParseConfig(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = "app-writer"
		cfg.MaxConns = 12
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		a.pools[name] = p
	}
	router, err := router.New(ctx, c.store, a.pools, router.Options{PollInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a.router = router
	a.wg.Add(1)
	go func() { defer a.wg.Done(); _ = router.Run(ctx) }()
	for w := 0; w < 8; w++ {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 29))
			for ctx.Err() == nil {
				// Each writer its own keys: two transactions of the
				// application writing one key's rows in two orders would
				// deadlock with each other, reshard or not.
				k := 1 + int64(w) + 8*rng.Int64N(int64(c.users)/8)
				usersFirst := rng.IntN(2) == 0
				start := time.Now()
				err := router.Do(ctx, k, func(ctx context.Context, pool *pgxpool.Pool) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						stmts := []string{`UPDATE users SET balance = balance + 1 WHERE id = $1`, `UPDATE orders SET amount = amount + 1 WHERE user_id = $1`}
						if !usersFirst {
							slices.Reverse(stmts)
						}
						for _, s := range stmts {
							if _, err := tx.Exec(ctx, s, k); err != nil {
								return err
							}
						}
						return nil
					})
				})
				if ctx.Err() != nil {
					return
				}
				a.record(err, time.Since(start))
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	for name, pool := range a.pools {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.sample(ctx, name, pool)
		}()
	}
	return a
}

func (a *appLoad) record(err error, took time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	code := ""
	var pe *pgconn.PgError
	switch {
	case err == nil:
		a.commits.Add(1)
	case router.IsFenceError(err):
		code = router.FenceSQLState
	case errors.As(err, &pe):
		code = pe.Code
	default:
		code = "client"
	}
	if code != "" {
		a.errs[code]++
		if a.examples[code] == "" {
			a.examples[code] = err.Error()
			if pe != nil && pe.Detail != "" {
				a.examples[code] += " (" + pe.Detail + ")"
			}
		}
	}
	a.slowest = max(a.slowest, took)
}

// sample reads, every 10 ms, the longest current lock wait of an app
// session blocked by a session that is not the application's.
func (a *appLoad) sample(ctx context.Context, shard string, pool *pgxpool.Pool) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET application_name = 'lock-sampler'"); err != nil {
		return
	}
	for ctx.Err() == nil {
		var secs float64
		var lock, blocker string
		err := conn.QueryRow(ctx, `
SELECT extract(epoch FROM clock_timestamp() - l.waitstart)::float8,
	l.locktype || ' ' || coalesce(l.relation::regclass::text, '') || ' ' || l.mode,
	(SELECT string_agg(b.application_name || ': ' || left(b.query, 60), '; ') FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(l.pid)))
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND a.application_name LIKE 'app-%' AND l.waitstart IS NOT NULL
  AND EXISTS (SELECT 1 FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(l.pid)) AND b.application_name NOT LIKE 'app-%')
ORDER BY 1 DESC LIMIT 1`).Scan(&secs, &lock, &blocker)
		if err == nil {
			d := time.Duration(secs * float64(time.Second))
			a.mu.Lock()
			if d > a.worst.wait {
				a.worst = lockWait{wait: d, shard: shard, lock: lock, blocker: blocker}
			}
			a.mu.Unlock()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// longReads opens, on every shard, a SELECT of users and orders that stays
// open for d (holding its locks and its snapshot).
func (a *appLoad) longReads(t *testing.T, d time.Duration) {
	for name, pool := range a.pools {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
			defer cancel()
			conn, err := pool.Acquire(ctx)
			if err != nil {
				a.record(err, 0)
				return
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "SET application_name = 'app-reader'"); err != nil {
				a.record(err, 0)
				return
			}
			start := time.Now()
			_, err = conn.Exec(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM orders), pg_sleep(%f)`, d.Seconds()))
			a.readers.Add(1)
			t.Logf("a %s SELECT on %s ended after %s: %v", d, name, time.Since(start).Round(time.Millisecond), err)
			if err != nil {
				a.record(err, 0)
			}
			if _, err := conn.Exec(ctx, "SET application_name = 'app-writer'"); err != nil {
				a.record(err, 0)
			}
		}()
	}
}

func (a *appLoad) stop(t *testing.T) {
	a.cancel()
	a.wg.Wait()
	for _, p := range a.pools {
		p.Close()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var codes []string
	for code, n := range a.errs {
		codes = append(codes, fmt.Sprintf("%s: %d (%s)", code, n, a.examples[code]))
	}
	slices.Sort(codes)
	t.Logf("application: %d transactions committed, %d long SELECTs; errors by SQLSTATE: %s", a.commits.Load(), a.readers.Load(), strings.Join(append([]string{"none besides:"}, codes...), " "))
	t.Logf("worst lock wait of an application session on a session not the application's: %s (%s %s, blocked by %s); slowest writer transaction %s (CPU included, machine shared)",
		a.worst.wait.Round(time.Millisecond), a.worst.shard, a.worst.lock, a.worst.blocker, a.slowest.Round(time.Millisecond))
}

// TestFenceNeverStallsTheApplication (issue #29): through an add-node that
// cuts over every move and a rollback of it in GRACE, with writers whose
// transactions touch users and orders in varying order and 60 s SELECTs
// open on every shard at the cutovers and at the rollback, the application
// sees no error but the fence's RSF01 (which the router retries) and no
// application statement waits more than 50 ms on a lock held or requested
// by reshard.
func TestFenceNeverStallsTheApplication(t *testing.T) {
	c := newCluster(t, 5_000)
	c.startWorker()
	app := startAppLoad(t, c)
	defer app.cancel()
	req := c.request("e2e_fencelocks")
	req.GracePeriod = new(10 * time.Minute)
	run := c.start(req)
	const long = 60 * time.Second
	deadline := time.Now().Add(6 * time.Minute)
	readAtCutover := false
	for {
		st, ok := c.state(run.GetID())
		if ok && !readAtCutover {
			if _, at := anyIn(st, workflows.PhaseCutover); at {
				app.longReads(t, long)
				readAtCutover = true
			}
		}
		if ok && len(st.Moves) == 4 && allPast(st, workflows.PhaseCutover) {
			break
		}
		if time.Now().After(deadline) || st.Phase.Terminal() {
			t.Fatalf("moves did not all reach GRACE: %s\n%s", c.describe(run.GetID()), c.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	app.longReads(t, long)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{UpdateID: "rollback-e2e_fencelocks", WorkflowID: run.GetID(),
		UpdateName: workflows.UpdateRollback, WaitForStage: client.WorkflowUpdateStageCompleted})
	var msg string
	if err == nil {
		err = h.Get(ctx, &msg)
	}
	if err != nil {
		t.Fatalf("rollback in GRACE: %v", err)
	}
	st := c.wait(run, 6*time.Minute)
	if st.Phase != workflows.PhaseRolledBack {
		t.Fatalf("migration ended %s", st.Phase)
	}
	app.stop(t)
	if app.commits.Load() == 0 {
		t.Fatal("the application committed nothing")
	}
	for code := range app.errs {
		if code != router.FenceSQLState {
			t.Errorf("application error %s: %d (%s)", code, app.errs[code], app.examples[code])
		}
	}
	if app.worst.wait > 50*time.Millisecond {
		t.Errorf("an application session waited %s on %s for reshard's session (%s)", app.worst.wait, app.worst.lock, app.worst.blocker)
	}
}
