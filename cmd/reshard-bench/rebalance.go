package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/demo"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// The rebalance section (issue #16): a real local cluster of 8 shard servers
// (4 in the ring), the control database, the Temporal dev server and a
// reshard worker, driven through the reshard CLI as an operator would. The
// same data grows from 4 to 8 shards twice: by one `reshard rebalance --add`
// of four shards, then, after the cluster is reset to the same data, by four
// `reshard add-node` one after the other. Both use the same settings (short
// grace, no approval, the same --max-parallel-moves).

// rebalanceGrace is the GRACE period of every migration of the section:
// short, so that cleanup follows the cutover at once in both runs.
const rebalanceGrace = time.Second

// rebalanceRun is what one way of growing the cluster measured.
type rebalanceRun struct {
	migrations int
	moves      int
	moved      float64 // fraction of the token space, summed over migrations
	rowsCopied int64   // the moves' own counters (MoveState.RowsCopied)
	wall       time.Duration
	// phases: per phase, from the first move's start of it to the last
	// move's end of it, summed over the migrations.
	phases    map[workflows.Phase]time.Duration
	rowsAfter int64
}

// phaseText is the phases' spans in phase order, e.g. "SNAPSHOT_COPY 7.9s".
func (r rebalanceRun) phaseText() string {
	var parts []string
	for _, p := range workflows.Phases {
		if d := r.phases[p]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", p, d.Round(100*time.Millisecond)))
		}
	}
	return strings.Join(parts, ", ")
}

func runRebalance(ctx context.Context, _ *env, r *report) error {
	cfg := r.cfg
	bin, err := buildReshard(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(bin))
	state, err := os.MkdirTemp("", "reshard-bench-rebalance-")
	if err != nil {
		return err
	}
	if err := os.Chmod(state, 0o755); err != nil {
		return err
	}
	b := &rebalanceBench{bin: bin, state: state, users: cfg.rebalanceUsers, maxParallel: cfg.rebalanceMaxParallel, out: r.out}
	defer b.close(cfg.keep)
	start := time.Now()
	if b.cl, err = devenv.Up(ctx, devenv.Options{StateDir: state, Shards: 8}); err != nil {
		return fmt.Errorf("start the local cluster: %w", err)
	}
	fmt.Fprintf(r.out, "cluster in %s: control + 8 shard servers, Temporal at %s, up in %s\n", state, b.cl.Temporal.Address(), time.Since(start).Round(time.Millisecond))
	if b.tc, err = client.Dial(client.Options{HostPort: b.cl.Temporal.Address(), Namespace: devenv.Namespace, Logger: quietLogger{}}); err != nil {
		return fmt.Errorf("dial temporal: %w", err)
	}

	one, err := b.measure(ctx, "one rebalance", func(ctx context.Context) ([]workflows.MigrationState, error) {
		st, err := b.migrate(ctx, "bench-rebalance", "rebalance", "--add", "shard5,shard6,shard7,shard8")
		return []workflows.MigrationState{st}, err
	})
	if err != nil {
		return err
	}
	seq, err := b.measure(ctx, "four add-nodes", func(ctx context.Context) ([]workflows.MigrationState, error) {
		var out []workflows.MigrationState
		for i := 5; i <= 8; i++ {
			st, err := b.migrate(ctx, "bench-add-shard"+strconv.Itoa(i), "add-node", "shard"+strconv.Itoa(i))
			if err != nil {
				return out, err
			}
			out = append(out, st)
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	if one.rowsAfter != seq.rowsAfter {
		return fmt.Errorf("the two runs ended with different data: %d rows after the rebalance, %d after the add-nodes", one.rowsAfter, seq.rowsAfter)
	}
	setting := "no bound"
	if b.maxParallel > 0 {
		setting = strconv.Itoa(b.maxParallel)
	}
	same := fmt.Sprintf("%d users and %d orders (%d rows) on shard1..4 (16 balanced vnodes each), 8 servers, control DB, Temporal dev server and one worker on this machine; grace %s, no approval, --max-parallel-moves %s",
		b.users, 2*b.users, one.rowsAfter, rebalanceGrace, setting)
	r.add("rebalance_4_to_8_moved_fraction", one.moved, "fraction", fmt.Sprintf("moved %.4f; reshard rebalance --add shard5,shard6,shard7,shard8: %d moves; goal 0.500 ± 0.01", one.moved, one.moves))
	r.add("rebalance_4_to_8_sequential_moved_fraction", seq.moved, "fraction", fmt.Sprintf("moved %.4f; reshard add-node shard5, then shard6, shard7, shard8: %d moves in all, fractions summed (a range taken twice counts twice); the planner's figure is 0.634", seq.moved, seq.moves))
	r.add("rebalance_4_to_8_rows_copied", float64(one.rowsCopied), "rows", fmt.Sprintf("the moves' own copy counters; %.4f of the rows", float64(one.rowsCopied)/float64(one.rowsAfter)))
	r.add("rebalance_4_to_8_sequential_rows_copied", float64(seq.rowsCopied), "rows", fmt.Sprintf("the moves' own copy counters over the 4 add-nodes; %.4f of the rows; %.2f× the rebalance", float64(seq.rowsCopied)/float64(one.rowsAfter), float64(seq.rowsCopied)/float64(one.rowsCopied)))
	r.add("rebalance_4_to_8_wall_s", one.wall.Seconds(), "s", fmt.Sprintf("from reshard rebalance to the workflow's end (DONE: every move cleaned up); phases (first move in to last move out) %s; %s", one.phaseText(), same))
	r.add("rebalance_4_to_8_sequential_wall_s", seq.wall.Seconds(), "s", fmt.Sprintf("from the first reshard add-node to the fourth one's end, each started when the one before ended; phases summed over the 4 migrations %s; the same data and settings", seq.phaseText()))
	ratio := one.wall.Seconds() / seq.wall.Seconds()
	met := "met"
	if ratio > 0.6 {
		met = "NOT met"
	}
	r.add("rebalance_4_to_8_wall_vs_sequential", ratio, "ratio", fmt.Sprintf("goal ≤ 0.6: %s; rows copied %.2f of the sequence's, migrations 1 against 4; %d CPUs shared by 9 PostgreSQL servers, Temporal, the worker and any other work (the section's load average is in the header)",
		met, float64(one.rowsCopied)/float64(seq.rowsCopied), runtime.NumCPU()))
	return nil
}

// rebalanceBench is the section's cluster and what drives it.
type rebalanceBench struct {
	bin, state  string
	users       int64
	maxParallel int
	out         io.Writer
	cl          *devenv.Cluster
	tc          client.Client
	worker      *exec.Cmd
	exited      chan struct{}
	nWorkers    int
}

// measure resets the cluster to the same data (4 shards in the ring), starts
// a worker, runs grow and sums what its migrations report.
func (b *rebalanceBench) measure(ctx context.Context, what string, grow func(context.Context) ([]workflows.MigrationState, error)) (rebalanceRun, error) {
	var res rebalanceRun
	t0 := time.Now()
	rows, err := b.reset(ctx)
	if err != nil {
		return res, fmt.Errorf("%s: reset the cluster: %w", what, err)
	}
	fmt.Fprintf(b.out, "%s: cluster reset, %d rows loaded on shard1..4 and registered, in %s\n", what, rows, time.Since(t0).Round(time.Millisecond))
	if err := b.startWorker(ctx); err != nil {
		return res, err
	}
	defer b.stopWorker()
	start := time.Now()
	sts, err := grow(ctx)
	res.wall = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	res.phases = map[workflows.Phase]time.Duration{}
	for _, st := range sts {
		res.migrations++
		res.moved += st.MovedFraction
		first, last := map[workflows.Phase]time.Time{}, map[workflows.Phase]time.Time{}
		for _, m := range st.Moves {
			res.moves++
			res.rowsCopied += m.RowsCopied
			for _, tm := range m.Timings {
				if f, ok := first[tm.Phase]; !ok || tm.Start.Before(f) {
					first[tm.Phase] = tm.Start
				}
				if tm.End.After(last[tm.Phase]) {
					last[tm.Phase] = tm.End
				}
			}
		}
		for p, f := range first {
			if l := last[p]; l.After(f) {
				res.phases[p] += l.Sub(f)
			}
		}
	}
	// Every row on its owner in the final topology, and none lost.
	pools, ctl, err := b.connect(ctx)
	if err != nil {
		return res, err
	}
	defer closePools(pools, ctl)
	cur, err := topology.NewStore(ctl).Current(ctx)
	if err != nil {
		return res, fmt.Errorf("%s: read the final topology: %w", what, err)
	}
	if n := len(cur.Ring.Shards()); n != 8 || len(cur.Migrating()) > 0 {
		return res, fmt.Errorf("%s: topology v%d has %d shards and %d ranges migrating; want 8 and none", what, cur.Version, n, len(cur.Migrating()))
	}
	place, err := demo.CheckPlacement(ctx, pools, cur.Ring)
	if err != nil {
		return res, err
	}
	for _, n := range place.Rows {
		res.rowsAfter += n
	}
	if !place.OK() || res.rowsAfter != rows {
		return res, fmt.Errorf("%s: after the migrations %d rows (loaded %d), misplaced per shard %v", what, res.rowsAfter, rows, place.Misplaced)
	}
	fmt.Fprintf(b.out, "%s: %d migration(s), %d moves, moved %.4f of the token space, %d rows copied, %s; every row on its owner in topology v%d\n",
		what, res.migrations, res.moves, res.moved, res.rowsCopied, res.wall.Round(100*time.Millisecond), cur.Version)
	fmt.Fprintf(b.out, "%s: phases (first move in to last move out, summed over migrations): %s\n", what, res.phaseText())
	return res, nil
}

// reset gives every server a new, empty reshard database (the control
// database's topology and the shards' rows, fences and slots go with the
// old one), creates the demo tables on every shard, publishes topology v1
// over shard1..4 (reshard init), loads the users and their orders on their
// owners and registers the keyspace (reshard init --table). It returns the
// rows loaded.
func (b *rebalanceBench) reset(ctx context.Context) (int64, error) {
	for _, n := range b.cl.Nodes {
		if err := recreateDatabase(ctx, n.Server); err != nil {
			return 0, err
		}
	}
	pools, ctl, err := b.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer closePools(pools, ctl)
	if err := demo.CreateSchema(ctx, pools); err != nil {
		return 0, err
	}
	if _, err := b.reshard(ctx, "init", "--shards", "shard1,shard2,shard3,shard4"); err != nil {
		return 0, err
	}
	cur, err := topology.NewStore(ctl).Current(ctx)
	if err != nil {
		return 0, fmt.Errorf("read topology v1: %w", err)
	}
	rows, err := demo.Load(ctx, pools, cur.Ring, demo.LoadOptions{Users: b.users, OrdersPerUser: 2, PayloadBytes: 100, PayloadEvery: 1})
	if err != nil {
		return 0, err
	}
	if _, err := b.reshard(ctx, "init", "--table", "users:id", "--table", "orders:user_id"); err != nil {
		return 0, err
	}
	return rows, nil
}

// recreateDatabase drops the reshard database of s (with its replication
// slots) and creates it again, empty; replication origins, which belong to
// the server, are dropped too.
func recreateDatabase(ctx context.Context, s devenv.Server) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres", true))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", s.Name, err)
	}
	defer conn.Close(ctx)
	db := pgx.Identifier{devenv.Database}.Sanitize()
	for _, q := range []string{
		`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '` + devenv.Database + `'`,
		`SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin`,
		`DROP DATABASE IF EXISTS ` + db + ` WITH (FORCE)`,
		`CREATE DATABASE ` + db,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("reset %s: %s: %w", s.Name, q, err)
		}
	}
	return nil
}

// connect opens a pool on every shard's reshard database and on the control
// database.
func (b *rebalanceBench) connect(ctx context.Context) (map[string]*pgxpool.Pool, *pgxpool.Pool, error) {
	pools := map[string]*pgxpool.Pool{}
	var ctl *pgxpool.Pool
	for _, n := range b.cl.Nodes {
		p, err := pgxpool.New(ctx, n.DSN(devenv.Database, true))
		if err != nil {
			closePools(pools, ctl)
			return nil, nil, fmt.Errorf("connect to %s: %w", n.Name, err)
		}
		if n.Role == devenv.RoleControl {
			ctl = p
		} else {
			pools[n.Name] = p
		}
	}
	if ctl == nil {
		closePools(pools, nil)
		return nil, nil, errors.New("the cluster has no control server")
	}
	return pools, ctl, nil
}

func closePools(pools map[string]*pgxpool.Pool, ctl *pgxpool.Pool) {
	for _, p := range pools {
		p.Close()
	}
	if ctl != nil {
		ctl.Close()
	}
}

// migrate starts a migration with the reshard CLI (the section's settings
// added) and waits for its workflow's end, which must be DONE.
func (b *rebalanceBench) migrate(ctx context.Context, id string, args ...string) (workflows.MigrationState, error) {
	var st workflows.MigrationState
	args = append(args, "--id", id, "--grace", rebalanceGrace.String(), "--max-parallel-moves", strconv.Itoa(b.maxParallel))
	if _, err := b.reshard(ctx, args...); err != nil {
		return st, err
	}
	if err := b.tc.GetWorkflow(ctx, workflows.MigrationWorkflowID(id), "").Get(ctx, &st); err != nil {
		return st, fmt.Errorf("migration %s: %w (worker log %s)", id, err, b.workerLog())
	}
	if st.Phase != workflows.PhaseDone {
		return st, fmt.Errorf("migration %s ended %s: %s (worker log %s)", id, st.Phase, st.Error, b.workerLog())
	}
	return st, nil
}

// reshard runs the reshard CLI on the cluster's configuration.
func (b *rebalanceBench) reshard(ctx context.Context, args ...string) (string, error) {
	args = append(args, "--config", b.cl.ConfigPath(), "--log-level", "warn")
	out, err := exec.CommandContext(ctx, b.bin, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("reshard %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (b *rebalanceBench) workerLog() string {
	return filepath.Join(b.state, fmt.Sprintf("worker%d.log", b.nWorkers))
}

// startWorker runs `reshard worker` and waits until /healthz answers.
func (b *rebalanceBench) startWorker(ctx context.Context) error {
	port, err := devenv.FreePort()
	if err != nil {
		return err
	}
	b.nWorkers++
	logf, err := os.Create(b.workerLog())
	if err != nil {
		return err
	}
	listen := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(b.bin, "worker", "--config", b.cl.ConfigPath(), "--listen", listen, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start the worker: %w", err)
	}
	b.worker, b.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); logf.Close(); close(done) }(b.exited)
	deadline := time.Now().Add(time.Minute)
	for {
		if resp, err := http.Get("http://" + listen + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-b.exited:
			return fmt.Errorf("the worker exited at start (log %s)", b.workerLog())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the worker did not become healthy within a minute (log %s)", b.workerLog())
		}
	}
}

// stopWorker interrupts the worker it started and waits for it.
func (b *rebalanceBench) stopWorker() {
	if b.worker == nil {
		return
	}
	_ = b.worker.Process.Signal(os.Interrupt)
	select {
	case <-b.exited:
	case <-time.After(20 * time.Second):
		_ = b.worker.Process.Kill()
		<-b.exited
	}
	b.worker = nil
}

// close stops what the section started: the worker, then the cluster
// (devenv.Down, or Destroy unless keep).
func (b *rebalanceBench) close(keep bool) {
	b.stopWorker()
	if b.tc != nil {
		b.tc.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if keep {
		if err := devenv.Down(ctx, b.state); err != nil {
			fmt.Fprintln(os.Stderr, "reshard-bench: stop the rebalance cluster:", err)
		}
		fmt.Fprintf(b.out, "kept %s (reshard dev up --state-dir %s starts it again)\n", b.state, b.state)
		return
	}
	if err := devenv.Destroy(ctx, b.state); err != nil {
		fmt.Fprintln(os.Stderr, "reshard-bench: remove the rebalance cluster:", err)
	}
}

// buildReshard builds the reshard binary into a temporary directory.
func buildReshard(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "reshard-bench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "reshard")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/reshard/reshard/cmd/reshard").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("build reshard: %w: %s", err, out)
	}
	return bin, nil
}

// quietLogger keeps the Temporal client's own logging out of the report.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}
