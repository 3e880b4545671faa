// Package e2e runs whole migrations through the real worker binary, a real
// Temporal dev server and real PostgreSQL servers, with writers going.
package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// bin is the reshard binary, built once.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "reshard-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "reshard")
	build := exec.Command("go", "build", "-o", bin, "github.com/reshard/reshard/cmd/reshard")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build reshard:", err)
		os.Exit(1)
	}
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

const schema = `
CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL, balance int NOT NULL DEFAULT 0);
CREATE TABLE orders (user_id bigint NOT NULL, id bigint NOT NULL, amount int NOT NULL, PRIMARY KEY (user_id, id));`

var tables = tableset.Spec{Name: "users", Tables: []tableset.TableSpec{
	{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"},
}}

var usersTable = ledger.Table{Name: "users", Key: "id", Val: "name"}

// cluster is four shards with data and a topology, an empty fifth shard, a
// control database, Temporal and the worker's configuration.
type cluster struct {
	t     *testing.T
	ctl   *pgtest.DB
	dbs   map[string]*pgtest.DB
	pools map[string]*pgxpool.Pool
	store *topology.Store
	// routers is the control database as the writers' routers read it,
	// when not store.
	routers  *topology.Store
	ring     *ring.Ring
	tc       client.Client
	config   string
	dir      string
	users    int
	orders   int64
	ledger   *ledger.Ledger
	stopW    context.CancelFunc
	stats    *ledger.Stats
	worker   *exec.Cmd
	exited   chan struct{} // closed when worker has exited
	listen   string        // the worker's /metrics and /healthz address
	nWorkers int
	// writerStarts counts startWriters calls on this cluster.
	writerStarts int
	// logLevel of the workers started from now on ("info" when empty).
	logLevel string
	// workerArgs are added to the command line of the workers started
	// from now on.
	workerArgs []string
	// onWrite, if set before startWriters, hears of every write of the
	// ledger writers (ledger.WriterOptions.OnWrite).
	onWrite func(k int64, sent, done time.Time)
}

func shard(i int) string { return "shard" + strconv.Itoa(i) }

// forceSQLCatchUp are worker flags that make every CDC stream catch up by
// SQL peeks of its slot whenever it is behind at all (checked at its start
// and every 5 s), where the default waits for 16 MB of lag.
var forceSQLCatchUp = []string{"--cdc-sql-catch-up-bytes", "1"}

// sqlCatchUps counts the catch-ups by SQL peeks in the workers' logs.
func (c *cluster) sqlCatchUps() int {
	return strings.Count(c.allWorkerLogs(), `msg="cdc catching up by SQL peeks"`)
}

// readAheadCatchUps counts those that read a copy of the slot ahead of the
// applier (not peeking it in place): the attribute is that line's alone.
func (c *cluster) readAheadCatchUps() int {
	return strings.Count(c.allWorkerLogs(), `read_ahead=true`)
}

// allWorkerLogs is every line every worker logged (workerLogs is the part
// worth printing).
func (c *cluster) allWorkerLogs() string {
	var b strings.Builder
	for i := 1; i <= c.nWorkers; i++ {
		out, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("worker%d.log", i)))
		b.Write(out)
	}
	return b.String()
}

func newCluster(t *testing.T, users int) *cluster { return newClusterOn(t, users, 0) }

// newClusterOn is newCluster with the control database on server ctlServer
// (0 shares shard1's server; 5 or more gives it one of its own, which a test
// can stop without stopping a shard).
func newClusterOn(t *testing.T, users, ctlServer int) *cluster {
	t.Helper()
	return newClusterWith(t, users, ctlServer, pgtest.Temporal(t))
}

// newClusterWith is newClusterOn with the Temporal server tmp (one a test
// can kill and start again).
func newClusterWith(t *testing.T, users, ctlServer int, tmp devenv.Temporal) *cluster {
	t.Helper()
	return buildCluster(t, users, ctlServer, tmp, nil)
}

// buildCluster is newClusterWith; roles, when not nil, is called once the
// databases and tables exist, before anything else is made in them (say, to
// connect c.ctl and c.dbs as other roles).
func buildCluster(t *testing.T, users, ctlServer int, tmp devenv.Temporal, roles func(c *cluster)) *cluster {
	t.Helper()
	ctx := context.Background()
	c := &cluster{t: t, dbs: map[string]*pgtest.DB{}, pools: map[string]*pgxpool.Pool{}, users: users, dir: pgtest.TempDir(t, "e2e")}
	c.ctl = pgtest.NewDB(t, ctlServer)
	for i := 1; i <= 5; i++ {
		db := pgtest.NewDB(t, i-1)
		db.Exec(t, schema)
		c.dbs[shard(i)], c.pools[shard(i)] = db, db.Pool
	}
	if roles != nil {
		roles(c)
	}
	if err := topology.Migrate(ctx, c.ctl.Pool); err != nil {
		t.Fatal(err)
	}
	c.store = topology.NewStore(c.ctl.Pool)
	var specs []ring.Shard
	for i := 1; i <= 4; i++ {
		specs = append(specs, ring.Shard{Name: shard(i)})
	}
	r, err := ring.Build(specs, ring.Options{VNodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	c.ring = r
	for i := 1; i <= 4; i++ {
		ref, err := topology.ParseConnRef(c.dbs[shard(i)].DSN)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.store.RegisterShard(ctx, topology.Shard{Name: shard(i), Conn: ref, State: topology.ShardActive}); err != nil {
			t.Fatal(err)
		}
	}
	top, err := topology.New(r, nil, "initial")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.store.Publish(ctx, 0, top); err != nil {
		t.Fatal(err)
	}
	// Every user and its orders on the owner of its id.
	for i := 1; i <= 4; i++ {
		pred := ring.Predicate("hashint8extended(g::bigint, 0)", r.Ranges(shard(i)))
		c.dbs[shard(i)].Exec(t, fmt.Sprintf(`INSERT INTO users SELECT g, 'v0-' || g, 0 FROM generate_series(1, %d) g WHERE %s`, users, pred))
		c.dbs[shard(i)].Exec(t, fmt.Sprintf(`INSERT INTO orders SELECT g, o, g %% 97 FROM generate_series(1, %d) g, generate_series(1, 1 + g %% 2) o WHERE %s`, users, pred))
		c.dbs[shard(i)].Exec(t, `ANALYZE`)
	}
	for i := 1; i <= 4; i++ {
		c.orders += c.dbs[shard(i)].QueryInt64(t, `SELECT count(*) FROM orders`)
	}
	// The worker's configuration, as reshard dev up writes it.
	c.connect(tmp)
	return c
}

// connect writes the worker's configuration (every shard of c.dbs, as
// reshard dev up writes it) and dials Temporal tmp.
func (c *cluster) connect(tmp devenv.Temporal) {
	t := c.t
	t.Helper()
	wc := devenv.WorkerConfig{Control: c.ctl.DSN, Shards: map[string]string{},
		Temporal: devenv.TemporalConfig{Address: tmp.Address(), Namespace: devenv.Namespace}}
	for name, db := range c.dbs {
		wc.Shards[name] = db.DSN
	}
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	c.config = filepath.Join(c.dir, "reshard.yaml")
	if err := os.WriteFile(c.config, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c.tc, err = client.Dial(client.Options{HostPort: tmp.Address(), Namespace: devenv.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.tc.Close)
	t.Cleanup(c.stopWorker)
	t.Cleanup(c.terminateLeftovers) // before the client closes (cleanups run last first)
}

// terminateLeftovers terminates the workflows a test leaves running in the
// Temporal server the package's tests share (they run one at a time): a
// test that failed with a migration still running made every later test's
// start refuse with "one migration at a time" (make e2e, at load 35: one
// step over its deadline failed four tests).
func (c *cluster) terminateLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: devenv.Namespace, Query: "ExecutionStatus = 'Running'"})
	if err != nil {
		c.t.Logf("listing the workflows left running: %v", err)
		return
	}
	for _, e := range resp.GetExecutions() {
		id := e.GetExecution().GetWorkflowId()
		if err := c.tc.TerminateWorkflow(ctx, id, "", "the test "+c.t.Name()+" ended with it running"); err != nil {
			c.t.Logf("terminating %s, left running: %v", id, err)
			continue
		}
		c.t.Logf("terminated %s, left running by the test", id)
	}
}

// startWorker runs `reshard worker` as a child process.
func (c *cluster) startWorker() {
	c.t.Helper()
	port, err := devenv.FreePort()
	if err != nil {
		c.t.Fatal(err)
	}
	c.nWorkers++
	logPath := filepath.Join(c.dir, fmt.Sprintf("worker%d.log", c.nWorkers))
	logf, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	level := c.logLevel
	if level == "" {
		level = "info"
	}
	// PLAN's capacity probe watches each shard's WAL for 200 ms, not 2 s,
	// as the cmd/reshard tests' workers do: no test here reads its
	// predictions, and each migration's PLAN waited the 2 s.
	cmd := exec.Command(bin, append([]string{"worker", "--config", c.config, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--log-level", level,
		"--wal-window", "200ms"}, c.workerArgs...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "RESHARD_PASSWORD=")
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	c.worker, c.exited = cmd, exited
	c.listen = "127.0.0.1:" + strconv.Itoa(port)
	// Up when /healthz answers.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port)); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			c.t.Fatalf("worker did not become healthy: %s", b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Logf("worker %d started (pid %d)", c.nWorkers, cmd.Process.Pid)
}

// killWorker kills the worker with SIGKILL: no cleanup runs.
func (c *cluster) killWorker() {
	if c.worker == nil {
		return
	}
	_ = c.worker.Process.Kill()
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		c.t.Fatal("the killed worker did not exit")
	}
	c.t.Logf("worker %d killed", c.nWorkers)
	c.worker = nil
}

func (c *cluster) stopWorker() {
	if c.worker != nil {
		_ = c.worker.Process.Signal(os.Interrupt)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = c.worker.Process.Kill()
			<-c.exited
		}
		c.worker = nil
	}
}

func (c *cluster) workerLogs() string {
	var b strings.Builder
	for i := 1; i <= c.nWorkers; i++ {
		out, _ := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("worker%d.log", i)))
		lines := strings.Split(string(out), "\n")
		// Every phase change to FAILED or ROLLING_BACK and the errors
		// before it, then the last lines.
		var errs []string
		for _, l := range lines {
			if strings.Contains(l, "phase=FAILED") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "stopped:") {
				errs = append(errs, l)
			}
		}
		if len(errs) > 30 {
			errs = errs[len(errs)-30:]
		}
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- worker %d (errors)\n%s\n--- worker %d (last lines)\n%s\n", i, strings.Join(errs, "\n"), i, strings.Join(lines, "\n"))
	}
	return b.String()
}

// startWriters writes through the topology router (upserts and deletes of
// existing and new users) until stopWriters, recording every acknowledged
// write in the ledger.
func (c *cluster) startWriters() { c.startWritersWith(nil) }

// startWritersWith is startWriters with the router's metrics in m.
func (c *cluster) startWritersWith(m *router.Metrics) {
	ctx, cancel := context.WithCancel(context.Background())
	store := c.store
	if c.routers != nil {
		store = c.routers
	}
	router, err := router.New(ctx, store, c.pools, router.Options{PollInterval: 200 * time.Millisecond, Metrics: m})
	if err != nil {
		c.t.Fatal(err)
	}
	go func() { _ = router.Run(ctx) }()
	// Started again (writers paused for a check), they go on with the same
	// ledger, writing values never written before.
	first := c.ledger == nil
	if first {
		c.ledger = ledger.New()
	}
	var keys []int64
	for k := int64(1); k <= 400; k++ {
		keys = append(keys, k) // existing users
		if first {
			c.ledger.Ack(k, ledger.Value{V: "v0-" + strconv.FormatInt(k, 10)})
		}
	}
	for k := int64(1_000_001); k <= 1_000_400; k++ {
		keys = append(keys, k) // new users
		if first {
			c.ledger.Ack(k, ledger.Value{Deleted: true})
		}
	}
	c.writerStarts++
	c.stats = ledger.Write(ctx, router, c.ledger, ledger.WriterOptions{Table: usersTable, Keys: keys, Workers: 4, Pause: 5 * time.Millisecond,
		Seed: 7 + uint64(c.writerStarts), Prefix: fmt.Sprintf("s%d-", c.writerStarts), OnWrite: c.onWrite})
	c.stopW = cancel
}

func (c *cluster) stopWriters() {
	c.stopW()
	c.stats.Wait()
	c.t.Logf("writers: %d acknowledged, %d failed (by SQLSTATE: %s), %d fence errors after retries", c.stats.Acked.Load(), c.stats.Failed.Load(), c.stats.FailedByCode(), c.stats.FenceErrors.Load())
	for _, e := range c.stats.FailureSamples() {
		c.t.Logf("writers: first failure of %s", e)
	}
	if c.stats.Acked.Load() == 0 {
		c.t.Fatal("the writers acknowledged nothing")
	}
}

// request is a migration of the e2e keyspace as reshard's CLI starts one
// by default: its keys are bigint, so the moves stream during their copy
// (StreamAuto resolved on). A test of the stream after the copy, or of a
// keyspace the copy gate cannot order, sets StreamDuringCopy false.
func (c *cluster) request(id string) workflows.MigrationRequest {
	return workflows.MigrationRequest{
		ID: id, Kind: workflows.KindAddNode, Shard: shard(5), Tables: tables,
		ChunkRows: 500, GracePeriod: new(8 * time.Second), CutoverBudget: 5 * time.Second,
		CopySlice: 2 * time.Second, HeartbeatTimeout: 5 * time.Second, PollInterval: 500 * time.Millisecond,
		CutoverBackoff: 2 * time.Second, StreamDuringCopy: true, StreamAuto: true,
	}
}

// shortGrace is the GRACE of the make test scenarios that only need GRACE
// to run (its reverse stream started, then cleaned up), not to last:
// request's 8 s was most of their wait after the last cutover.
// TestAddNodeAsLeastPrivilegedRole checks, with 3 s, that every move's
// reverse stream starts in it.
const shortGrace = 3 * time.Second

func (c *cluster) start(req workflows.MigrationRequest) client.WorkflowRun {
	c.t.Helper()
	if req.Cluster == "" { // as reshard's CLI starts one: the workers check it
		id, err := c.store.ClusterID(context.Background())
		if err != nil {
			c.t.Fatal(err)
		}
		req.Cluster = id
	}
	run, err := c.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: workflows.MigrationWorkflowID(req.ID), TaskQueue: workflows.TaskQueue,
		StaticSummary: "e2e " + string(req.Kind) + " " + req.Shard,
	}, workflows.MigrationWorkflow, req)
	if err != nil {
		c.t.Fatal(err)
	}
	return run
}

func (c *cluster) wait(run client.WorkflowRun, timeout time.Duration) workflows.MigrationState {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var st workflows.MigrationState
	if err := workflows.Outcome(run.Get(ctx, &st), &st); err != nil {
		c.t.Fatalf("migration: %v\nstate: %s\n%s", err, c.describe(run.GetID()), c.workerLogs())
	}
	return st
}

// waitFor polls the migration's state until cond holds.
func (c *cluster) waitFor(run client.WorkflowRun, deadline time.Time, what string, cond func(workflows.MigrationState) bool) workflows.MigrationState {
	c.t.Helper()
	for {
		st, ok := c.state(run.GetID())
		if ok && cond(st) {
			return st
		}
		if time.Now().After(deadline) || (ok && st.Phase.Terminal()) {
			c.t.Fatalf("waiting for %s: %s\n%s", what, c.describe(run.GetID()), c.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) describe(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.tc.QueryWorkflow(ctx, id, "", workflows.QueryState)
	if err != nil {
		return "query: " + err.Error()
	}
	var st workflows.MigrationState
	if err := v.Get(&st); err != nil {
		return err.Error()
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	return string(b)
}

// checkData checks that every row is on the owner of its key under the
// current topology and nowhere else, that no initial row was lost, and that
// every acknowledged write is there.
func (c *cluster) checkData(st workflows.MigrationState) {
	t := c.t
	ctx := context.Background()
	cur, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Migrating()) != 0 || !cur.Ring.HasShard(shard(5)) || cur.Version != st.Version {
		t.Fatalf("final topology v%d (state says v%d): %d ranges migrating, shard5 in ring: %v", cur.Version, st.Version, len(cur.Migrating()), cur.Ring.HasShard(shard(5)))
	}
	sh, err := c.store.Shard(ctx, shard(5))
	if err != nil || sh.State != topology.ShardActive {
		t.Fatalf("shard5 registry: %+v %v", sh, err)
	}
	c.checkPlacement(cur)
	if n := c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM users`); n == 0 {
		t.Fatal("shard5 holds no user")
	}
	// Nothing of the move is left behind: no slot, no publication.
	for name, db := range c.dbs {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`); n != 0 {
			t.Fatalf("%d reshard slots left on %s", n, name)
		}
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'reshard%'`); n != 0 {
			t.Fatalf("%d reshard publications left on %s", n, name)
		}
	}
}

// checkPlacement: every user and every order on its owner in cur, once;
// no order lost; every initial user the writers did not touch still there;
// every write the Go writers acknowledged read back from its owner.
func (c *cluster) checkPlacement(cur topology.Topology) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	seen := map[int64]string{}
	var orders int64
	for name, db := range c.dbs {
		rows, err := db.Pool.Query(ctx, `SELECT id FROM users`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			if o := cur.Ring.OwnerInt64(id); o != name {
				t.Fatalf("user %d on %s, but its owner is %s", id, name, o)
			}
			if prev, dup := seen[id]; dup {
				t.Fatalf("user %d on %s and %s", id, prev, name)
			}
			seen[id] = name
		}
		rows.Close()
		var misplaced int64
		pred := ring.Predicate("hashint8extended(user_id, 0)", cur.Ring.Ranges(name))
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT (`+pred+`)), count(*) FROM orders`).Scan(&misplaced, new(int64)); err != nil {
			t.Fatal(err)
		}
		if misplaced != 0 {
			t.Fatalf("%d orders on %s belong elsewhere", misplaced, name)
		}
		orders += db.QueryInt64(t, `SELECT count(*) FROM orders`)
	}
	if orders != c.orders {
		t.Fatalf("%d orders after the migration, %d before", orders, c.orders)
	}
	// Every initial user the writers did not touch is still there.
	for k := int64(401); k <= int64(c.users); k++ {
		if _, ok := seen[k]; !ok {
			t.Fatalf("user %d lost", k)
		}
	}
	mm, err := c.ledger.Check(ctx, usersTable, c.pools, func(k int64) string { return cur.Ring.OwnerInt64(k) })
	if err != nil {
		t.Fatal(err)
	}
	failOnMismatches(t, mm, "acknowledged writes missing or wrong")
}

// failOnMismatches fails the test when the ledger found mismatches, naming
// how many and the first ten; what says what they are.
func failOnMismatches(t *testing.T, mm []ledger.Mismatch, what string) {
	t.Helper()
	if len(mm) > 0 {
		var s []string
		for _, m := range mm[:min(len(mm), 10)] {
			s = append(s, m.String())
		}
		t.Fatalf("%d %s: %s", len(mm), what, strings.Join(s, "; "))
	}
}

// checkState checks the final state; pauses: every move measured its write
// pause (a cutover finished from its journal by another worker does not
// know it).
func checkState(t *testing.T, st workflows.MigrationState, pauses bool) {
	t.Helper()
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("migration ended %s: %s", st.Phase, st.Error)
	}
	if st.MovedFraction < 0.17 || st.MovedFraction > 0.23 {
		t.Fatalf("moved fraction %.3f, want ≈0.20", st.MovedFraction)
	}
	if len(st.Moves) != 4 {
		t.Fatalf("%d moves, want one per old shard", len(st.Moves))
	}
	var sources []string
	for _, m := range st.Moves {
		if m.Phase != workflows.PhaseDone || !m.CopyDone || m.Verify == nil || !m.Verify.Passed || (pauses && m.WritePause <= 0) || m.Spec.Target != shard(5) {
			t.Fatalf("move %s: %+v", m.Spec.ID, m)
		}
		sources = append(sources, m.Spec.Source)
	}
	sort.Strings(sources)
	if strings.Join(sources, ",") != "shard1,shard2,shard3,shard4" {
		t.Fatalf("sources %v", sources)
	}
}

func TestAddNodeWithWriters(t *testing.T) {
	c := newCluster(t, 20_000)
	c.startWorker()
	c.startWriters()
	started := time.Now()
	req := c.request("e2e_add")
	req.GracePeriod = new(shortGrace)
	st := c.wait(c.start(req), 4*time.Minute)
	c.stopWriters()
	c.recordHistories(st, "add-node")
	t.Logf("add-node: %s, moved %.3f of the space, moves: %s", time.Since(started).Round(time.Second), st.MovedFraction, summary(st))
	checkState(t, st, true)
	c.checkData(st)
	c.checkMetrics()
}

// checkMetrics reads the worker's /metrics after a migration: phase
// durations, write pauses and cutover attempts are there; the series
// labelled with the migration's moves (copy, CDC and progress gauges) are
// gone, the moves having ended (the series stay bounded by the moves
// running); no connection string.
func (c *cluster) checkMetrics() {
	resp, err := http.Get("http://" + c.listen + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		`reshard_phase_duration_seconds_count{phase="SNAPSHOT_COPY"}`,
		`reshard_phase_duration_seconds_count{phase="GRACE"}`,
		`reshard_cutover_write_pause_seconds_count 4`,
		`reshard_cutover_attempts_total{outcome="done"} 4`,
		`reshard_control_db_up 1`,
		`reshard_cutover_open_write_pause_seconds 0`,
	} {
		if !strings.Contains(text, want) {
			c.t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, gone := range []string{`migration="e2e_add"`, `move="e2e_add_m`} {
		if strings.Contains(text, gone) {
			c.t.Errorf("/metrics still has series labelled %s after the migration ended", gone)
		}
	}
	for _, secret := range []string{"postgres://", "password", "dbname="} {
		if strings.Contains(text, secret) {
			c.t.Errorf("/metrics shows %q", secret)
		}
	}
}

// moveIDs are the workflow ids of a migration's moves.
func moveIDs(st workflows.MigrationState) []string {
	var ids []string
	for _, m := range st.Moves {
		ids = append(ids, workflows.MoveWorkflowID(workflows.MigrationWorkflowID(st.Request.ID), m.Spec.ID))
	}
	return ids
}

func summary(st workflows.MigrationState) string {
	var parts []string
	for _, m := range st.Moves {
		parts = append(parts, fmt.Sprintf("%s %s→%s %d rows, pause %s", m.Spec.ID, m.Spec.Source, m.Spec.Target, m.RowsCopied, m.WritePause.Round(time.Millisecond)))
	}
	return strings.Join(parts, "; ")
}

func (c *cluster) state(id string) (workflows.MigrationState, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var st workflows.MigrationState
	v, err := c.tc.QueryWorkflow(ctx, id, "", workflows.QueryState)
	if err != nil || v.Get(&st) != nil {
		return st, false
	}
	return st, true
}

// approve sends the approve-cutover Update, retrying while no move is ready
// for it yet (the validator refuses) or the worker is restarting.
func (c *cluster) approve(id string) {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			UpdateID: "approve-" + strconv.FormatInt(time.Now().UnixNano(), 10), WorkflowID: id,
			UpdateName: workflows.UpdateApprove, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		var msg string
		if err == nil {
			err = h.Get(ctx, &msg)
		}
		cancel()
		if err == nil {
			c.t.Logf("approve-cutover: %s", msg)
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("approve-cutover: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func anyIn(st workflows.MigrationState, p workflows.Phase) (string, bool) {
	for _, m := range st.Moves {
		if m.Phase == p {
			return m.Spec.ID, true
		}
	}
	return "", false
}

func order(p workflows.Phase) int { return slices.Index(workflows.Phases, p) }

// allPast: every move has reached CUTOVER or beyond.
func allPast(st workflows.MigrationState, p workflows.Phase) bool {
	if len(st.Moves) == 0 {
		return false
	}
	for _, m := range st.Moves {
		if order(m.Phase) <= order(p) {
			return false
		}
	}
	return true
}

// beyond: every move is past p, so p can no longer be hit.
func beyond(st workflows.MigrationState, p workflows.Phase) bool { return allPast(st, p) }

func phasesNow(st workflows.MigrationState) string {
	var s []string
	for _, m := range st.Moves {
		s = append(s, m.Spec.ID+"="+string(m.Phase))
	}
	return strings.Join(s, ",")
}

// recordHistories writes the histories of the migration and its moves to
// testdata/histories when RESHARD_RECORD_HISTORIES is set, for the replay
// test of package workflows (go test ./workflows -run Replay). Its value,
// unless "1", prefixes the file names, so that histories of older workflow
// versions stay next to the new ones.
func (c *cluster) recordHistories(st workflows.MigrationState, name string) {
	prefix := os.Getenv("RESHARD_RECORD_HISTORIES")
	if prefix == "" {
		return
	}
	if prefix != "1" {
		name = prefix + "-" + name
	}
	dir := filepath.Join("..", "testdata", "histories")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	ids := []string{workflows.MigrationWorkflowID(st.Request.ID)}
	for _, m := range st.Moves {
		ids = append(ids, workflows.MigrationWorkflowID(st.Request.ID)+"/"+m.Spec.ID)
	}
	for i, id := range ids {
		hist := &historypb.History{}
		it := c.tc.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				c.t.Fatal(err)
			}
			hist.Events = append(hist.Events, ev)
		}
		b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
		if err != nil {
			c.t.Fatal(err)
		}
		kind := "migration"
		if i > 0 {
			kind = "move" + strconv.Itoa(i)
		}
		path := filepath.Join(dir, name+"-"+kind+".json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			c.t.Fatal(err)
		}
		c.t.Logf("recorded %d events of %s in %s", len(hist.Events), id, path)
	}
}

// TestVerifyFailureRolledBack plants a row on the new shard, inside every
// move's ranges, that the source never had: verify must find it, stop
// before the cutover, and a rollback Update must put everything back (the
// old ring, no row on the new shard, every acknowledged write on its old
// owner, no slot left).
func TestVerifyFailureRolledBack(t *testing.T) {
	c := newCluster(t, 5_000)
	c.startWorker()
	c.startWriters()
	req := c.request("e2e_rb")
	req.Throttle = workflows.Throttle{RowsPerSec: 2000}
	run := c.start(req)
	deadline := time.Now().Add(3 * time.Minute)

	// Plant the rows as soon as the plan is known (JOINING or copying).
	var st workflows.MigrationState
	for {
		var ok bool
		if st, ok = c.state(run.GetID()); ok && len(st.Moves) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no plan: %s", c.describe(run.GetID()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	planted := map[int64]bool{}
	// A connection of its own: the replica role must not leak into the
	// pool the writers use.
	conn := c.dbs[shard(5)].Conn(t)
	for _, m := range st.Moves {
		k := int64(9_000_000)
		for !ring.ContainsAny(m.Spec.Ranges, ring.TokenInt64(k)) {
			k++
		}
		planted[k] = true
		if _, err := conn.Exec(context.Background(), fmt.Sprintf(`SET session_replication_role = replica; INSERT INTO users VALUES (%d, 'planted', 0)`, k)); err != nil {
			t.Fatal(err)
		}
	}
	for {
		st, _ = c.state(run.GetID())
		failed := 0
		for _, m := range st.Moves {
			if m.Phase == workflows.PhaseVerify && m.Verify != nil && !m.Verify.Passed {
				failed++
			}
		}
		if failed == 4 {
			break
		}
		if time.Now().After(deadline) || st.Phase.Terminal() {
			t.Fatalf("moves did not all fail verify: %s\n%s", c.describe(run.GetID()), c.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range st.Moves {
		if m.Verify.Mismatches != 1 || len(m.Verify.Samples) != 1 || !strings.Contains(m.Verify.Samples[0], "extra") {
			t.Fatalf("move %s verify: %+v", m.Spec.ID, m.Verify)
		}
	}
	// approve-cutover makes no sense here: rejected with the phases.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{UpdateID: "approve-rb", WorkflowID: run.GetID(),
		UpdateName: workflows.UpdateApprove, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "require-approval") {
		t.Fatalf("approve without require-approval: %v", err)
	}
	h, err = c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{UpdateID: "rollback-rb", WorkflowID: run.GetID(),
		UpdateName: workflows.UpdateRollback, WaitForStage: client.WorkflowUpdateStageCompleted})
	var msg string
	if err == nil {
		err = h.Get(ctx, &msg)
	}
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	t.Logf("rollback: %s", msg)
	st = c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	c.recordHistories(st, "rollback")
	if st.Phase != workflows.PhaseRolledBack {
		t.Fatalf("migration ended %s", st.Phase)
	}
	// The Temporal UI's list shows it (and its moves) as failed, not as a
	// green Completed, and ReshardPhase says why.
	for _, id := range append([]string{run.GetID()}, moveIDs(st)...) {
		d, err := c.tc.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			t.Fatal(err)
		}
		var phase string
		_ = converter.GetDefaultDataConverter().FromPayload(d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[workflows.SAPhase.GetName()], &phase)
		if got := d.GetWorkflowExecutionInfo().GetStatus(); got != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED || phase != string(workflows.PhaseRolledBack) {
			t.Errorf("%s after the rollback: Temporal status %s, ReshardPhase %q; want FAILED and ROLLED_BACK", id, got, phase)
		}
	}
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Migrating()) != 0 || cur.Ring.HasShard(shard(5)) {
		t.Fatalf("topology v%d after the rollback: %d migrating, shard5 in ring %v", cur.Version, len(cur.Migrating()), cur.Ring.HasShard(shard(5)))
	}
	for _, tok := range []int64{ring.MinToken + 1, -1, 0, 1, ring.MaxToken} {
		if cur.Ring.Owner(tok) != c.ring.Owner(tok) {
			t.Fatalf("token %d owned by %s after the rollback, by %s before", tok, cur.Ring.Owner(tok), c.ring.Owner(tok))
		}
	}
	if n := c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM users`) + c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("%d rows left on shard5 after the rollback", n)
	}
	mm, err := c.ledger.Check(context.Background(), usersTable, c.pools, c.ring.OwnerInt64)
	if err != nil || len(mm) > 0 {
		t.Fatalf("ledger after rollback: %v %v", err, mm)
	}
	for name, db := range c.dbs {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`); n != 0 {
			t.Fatalf("%d reshard slots left on %s", n, name)
		}
	}
}

// TestRollbackDuringGrace cuts every move over, then rolls the migration
// back from GRACE: the reverse cutover must bring every write made on the
// new shard back to the old owners (reverse CDC) and restore the old ring.
func TestRollbackDuringGrace(t *testing.T) { rollbackDuringGrace(t, "e2e_grb", nil) }

// rollbackDuringGrace runs TestRollbackDuringGrace as migration id, with
// adaptive limits when given (copy, verify and the rollback's deletes run
// under the adaptive throttle then).
func rollbackDuringGrace(t *testing.T, id string, adaptive *workflows.AdaptiveThrottle) {
	c := newCluster(t, 5_000)
	c.startWorker()
	c.startWriters()
	req := c.request(id)
	req.GracePeriod = new(10 * time.Minute)
	req.Throttle.Adaptive = adaptive
	run := c.start(req)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, ok := c.state(run.GetID())
		if ok && len(st.Moves) == 4 && allPast(st, workflows.PhaseCutover) {
			break
		}
		if time.Now().After(deadline) || st.Phase.Terminal() {
			t.Fatalf("moves did not all reach GRACE: %s\n%s", c.describe(run.GetID()), c.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Writes land on shard5 now; let some go through reverse CDC.
	time.Sleep(2 * time.Second)
	if n := c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM users`); n == 0 {
		t.Fatal("shard5 serves nothing in GRACE")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{UpdateID: "rollback-" + id, WorkflowID: run.GetID(),
		UpdateName: workflows.UpdateRollback, WaitForStage: client.WorkflowUpdateStageCompleted})
	var msg string
	if err == nil {
		err = h.Get(ctx, &msg)
	}
	if err != nil {
		t.Fatalf("rollback in GRACE: %v", err)
	}
	t.Logf("rollback: %s", msg)
	st := c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	name := "grace-rollback"
	if adaptive != nil {
		name += "-adaptive"
	}
	c.recordHistories(st, name)
	if st.Phase != workflows.PhaseRolledBack {
		t.Fatalf("migration ended %s", st.Phase)
	}
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Migrating()) != 0 || cur.Ring.HasShard(shard(5)) {
		t.Fatalf("topology v%d after the rollback: %d migrating, shard5 in ring %v", cur.Version, len(cur.Migrating()), cur.Ring.HasShard(shard(5)))
	}
	if n := c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM users`) + c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("%d rows left on shard5 after the rollback", n)
	}
	mm, err := c.ledger.Check(context.Background(), usersTable, c.pools, c.ring.OwnerInt64)
	if err != nil || len(mm) > 0 {
		t.Fatalf("ledger after the rollback: %v %v", err, mm)
	}
	var orders int64
	for name, db := range c.dbs {
		orders += db.QueryInt64(t, `SELECT count(*) FROM orders`)
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`); n != 0 {
			t.Fatalf("%d reshard slots left on %s", n, name)
		}
	}
	if orders != c.orders {
		t.Fatalf("%d orders after the rollback, %d before", orders, c.orders)
	}
}

// TestWorkerKilledMidCutover kills the worker while a cutover has the
// source fenced: a transaction held open on the source keeps the cutover in
// its in-flight wait. The next worker must settle the interrupted cutover
// from its journal (unfence the source), abort the attempts the open
// transaction still blocks, and cut over once it has ended.
func TestWorkerKilledMidCutover(t *testing.T) {
	c := newCluster(t, 5_000)
	c.startWorker()
	c.startWriters()
	req := c.request("e2e_midcut")
	req.CutoverBudget = 8 * time.Second
	req.GracePeriod = new(shortGrace)
	// Verify's snapshot slot, like any slot creation, waits for open write
	// transactions: hold ours only while the move waits for approval.
	req.RequireApproval = true
	run := c.start(req)
	deadline := time.Now().Add(4 * time.Minute)

	// The move out of shard1, waiting in CUTOVER for approval.
	var victim string
	for victim == "" {
		st, ok := c.state(run.GetID())
		if ok {
			for _, m := range st.Moves {
				if m.Spec.Source == shard(1) && m.Phase == workflows.PhaseCutover {
					victim = m.Spec.ID
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the move out of shard1 never waited in CUTOVER: %s", c.describe(run.GetID()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	blocker := c.dbs[shard(1)].Conn(t)
	bctx := context.Background()
	if _, err := blocker.Exec(bctx, `BEGIN; SELECT txid_current()`); err != nil {
		t.Fatal(err)
	}
	c.approve(run.GetID())
	// Wait until that move's cutover has fenced the source (its hold is
	// recorded before the fence, and the source is fenced elsewhere from
	// JOINING on: only the hold tells the cutover's fence), then kill.
	for {
		if c.ctl.QueryInt64(t, `SELECT count(*) FROM reshard.fence_hold WHERE shard = $1`, shard(1)) > 0 {
			time.Sleep(100 * time.Millisecond) // the reconcile that fences commits right after
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cutover never fenced shard1: %s", c.describe(run.GetID()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.killWorker()
	c.startWorker()
	// Let the next worker find the interrupted cutover and abort at least
	// once more against the open transaction (the move back in
	// CDC_CATCH_UP after its CUTOVER: only an aborted attempt goes back),
	// then end it. (Waiting for a second attempt in the move's state let
	// that attempt run its whole budget against the transaction too: a
	// move reports its attempts when its phase changes.)
	for {
		st, ok := c.state(run.GetID())
		if ok {
			for _, m := range st.Moves {
				if m.Spec.ID == victim && abortedCutover(m) {
					goto release
				}
				if m.Spec.ID == victim && m.Phase.Terminal() {
					t.Fatalf("move %s ended %s without an aborted cutover: %s\n%s", victim, m.Phase, c.describe(run.GetID()), c.workerLogs())
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no second cutover attempt: %s\n%s", c.describe(run.GetID()), c.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
release:
	if _, err := blocker.Exec(bctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	st := c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	for _, m := range st.Moves {
		if m.Spec.ID == victim {
			t.Logf("move %s: %d cutover attempts, write pause of the last %s", victim, m.Attempts, m.WritePause.Round(time.Millisecond))
			if m.Attempts < 2 {
				t.Fatalf("move %s cut over in %d attempts", victim, m.Attempts)
			}
		}
	}
	checkState(t, st, false)
	c.checkData(st)
}

// abortedCutover: m's timings show a CUTOVER followed by CDC_CATCH_UP, the
// way back of an aborted attempt.
func abortedCutover(m workflows.MoveState) bool {
	for i := 1; i < len(m.Timings); i++ {
		if m.Timings[i-1].Phase == workflows.PhaseCutover && m.Timings[i].Phase == workflows.PhaseCDCCatchUp {
			return true
		}
	}
	return false
}

// TestCollisionStopsTheMoveUntilResumed: a table whose primary key is not
// its shard key can collide across shards (per-shard sequences). The new
// shard holds a payment of its own under the id of a payment that moves to
// it: the move from that payment's shard stops in SNAPSHOT_COPY, names the
// key in status, and leaves the new shard's row alone; once the operator
// gives that row another id, resume completes the migration with nothing
// lost.
func TestCollisionStopsTheMoveUntilResumed(t *testing.T) {
	c := newCluster(t, 3_000)
	for i := 1; i <= 5; i++ {
		c.dbs[shard(i)].Exec(t, `CREATE TABLE payments (id bigint PRIMARY KEY, user_id bigint NOT NULL, amount int NOT NULL)`)
	}
	for i := 1; i <= 4; i++ {
		pred := ring.Predicate("hashint8extended(g::bigint, 0)", c.ring.Ranges(shard(i)))
		c.dbs[shard(i)].Exec(t, fmt.Sprintf(`INSERT INTO payments SELECT g, g, g %% 50 FROM generate_series(1, %d) g WHERE %s`, c.users, pred))
	}
	req := c.request("e2e-collide")
	req.GracePeriod = new(shortGrace)
	req.Tables = tableset.Spec{Name: "users", Tables: append(append([]tableset.TableSpec(nil), tables.Tables...),
		tableset.TableSpec{Table: "payments", KeyColumn: "user_id"})}
	next, _, err := ring.PlanAddNode(c.ring, ring.Shard{Name: shard(5)}, ring.Options{VNodes: req.VNodes})
	if err != nil {
		t.Fatal(err)
	}
	var moving, staying int64
	for g := int64(1); g <= int64(c.users) && (moving == 0 || staying == 0); g++ {
		if next.OwnerInt64(g) == shard(5) {
			moving = cmp.Or(moving, g)
		} else {
			staying = cmp.Or(staying, g)
		}
	}
	c.dbs[shard(5)].Exec(t, `INSERT INTO payments VALUES ($1, $2, 7)`, moving, staying)
	source := c.ring.OwnerInt64(moving)

	c.startWorker()
	c.startWriters()
	run := c.start(req)
	deadline := time.Now().Add(3 * time.Minute)
	var stopped workflows.MoveState
	for !stopped.Stopped {
		st, _ := c.state(run.GetID())
		for _, m := range st.Moves {
			if m.Stopped {
				stopped = m
			}
		}
		if time.Now().After(deadline) || st.Phase.Terminal() {
			t.Fatalf("no move stopped: %s\n%s", c.describe(run.GetID()), c.workerLogs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if stopped.Spec.Source != source || stopped.Phase != workflows.PhaseSnapshotCopy ||
		!strings.Contains(stopped.Error, fmt.Sprintf("id=%d", moving)) || !strings.Contains(stopped.Error, "reshard resume e2e-collide") {
		t.Fatalf("stopped move: source %s (want %s), phase %s, error %q", stopped.Spec.Source, source, stopped.Phase, stopped.Error)
	}
	t.Logf("move %s: %s", stopped.Spec.ID, stopped.Error)
	if u := c.dbs[shard(5)].QueryInt64(t, `SELECT user_id FROM payments WHERE id = $1`, moving); u != staying {
		t.Fatalf("shard5's own payment %d now belongs to user %d, not %d", moving, u, staying)
	}
	cli := func(args ...string) string {
		out, err := exec.Command(bin, append(args, "--config", c.config)...).CombinedOutput()
		if err != nil {
			t.Fatalf("reshard %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := cli("status", "e2e-collide"); !strings.Contains(out, "stopped in SNAPSHOT_COPY") || !strings.Contains(out, fmt.Sprintf("id=%d", moving)) {
		t.Errorf("status does not show the stopped move:\n%s", out)
	}
	// The operator gives shard5's payment another id, and resumes. shard5
	// is fenced wherever it owns nothing (all of the space, while it joins),
	// so the repair runs as the appliers do, under the replica role.
	fix := c.dbs[shard(5)].Conn(t)
	for _, q := range []string{`SET session_replication_role = replica`, fmt.Sprintf(`UPDATE payments SET id = id + 1000000000 WHERE id = %d`, moving)} {
		if _, err := fix.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	if out := cli("resume", "e2e-collide"); !strings.Contains(out, "1 stopped moves run their phase again") {
		t.Errorf("resume: %s", out)
	} else {
		t.Logf("%s", strings.TrimSpace(out))
	}
	st := c.wait(run, 4*time.Minute)
	c.stopWriters()
	checkState(t, st, true)
	c.checkData(st)
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Every payment on the owner of its user, and one more: shard5's own.
	var total int64
	for name, db := range c.dbs {
		total += db.QueryInt64(t, `SELECT count(*) FROM payments`)
		rows, err := db.Pool.Query(context.Background(), `SELECT user_id FROM payments WHERE id <= $1`, c.users)
		if err != nil {
			t.Fatal(err)
		}
		users, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range users {
			if o := cur.Ring.OwnerInt64(u); o != name {
				t.Fatalf("payment of user %d on %s, but its owner is %s", u, name, o)
			}
		}
	}
	if total != int64(c.users)+1 {
		t.Fatalf("%d payments on all shards, want %d and shard5's own", total, c.users)
	}
	if u := c.dbs[shard(5)].QueryInt64(t, `SELECT user_id FROM payments WHERE id = $1`, moving); u != moving {
		t.Fatalf("payment %d on shard5 belongs to user %d, want the moved one", moving, u)
	}
	if u := c.dbs[shard(5)].QueryInt64(t, `SELECT user_id FROM payments WHERE id = $1`, moving+1_000_000_000); u != staying {
		t.Fatalf("shard5's own payment, renumbered: user %d, want %d", u, staying)
	}
}

// wall logs the wall time of a scenario (go test -v shows it per test too).
func wall(t *testing.T) {
	start := time.Now()
	t.Cleanup(func() { t.Logf("wall time of %s: %s", t.Name(), time.Since(start).Round(time.Second)) })
}

// update sends an operator Update to the migration and returns its answer.
func (c *cluster) update(id, name string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID: name + "-" + fmt.Sprint(time.Now().UnixNano()), WorkflowID: id,
		UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var msg string
	if err == nil {
		err = h.Get(ctx, &msg)
	}
	return msg, err
}
