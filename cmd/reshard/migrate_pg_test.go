package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// testCluster is a control database and three shards on three servers
// (shard3 is left out of the first ring, for add-node), with the same two
// tables on every shard, described by a reshard.yaml.
type testCluster struct {
	config  string
	control *pgtest.DB
	shards  map[string]*pgtest.DB
	tc      client.Client // nil without Temporal
	ui      string
}

func newTestCluster(t *testing.T, withTemporal bool) *testCluster {
	t.Helper()
	c := &testCluster{control: pgtest.NewDB(t, 0), shards: map[string]*pgtest.DB{
		"shard1": pgtest.NewDB(t, 1), "shard2": pgtest.NewDB(t, 2), "shard3": pgtest.NewDB(t, 0)}}
	wc := devenv.WorkerConfig{Control: c.control.DSN, Shards: map[string]string{}, Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
	for name, db := range c.shards {
		wc.Shards[name] = db.DSN
		db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL)`)
		db.Exec(t, `CREATE TABLE orders (user_id bigint NOT NULL, id bigint NOT NULL, amount int, PRIMARY KEY (user_id, id))`)
		if name != "shard3" {
			db.Exec(t, `INSERT INTO users SELECT g, 'user ' || g FROM generate_series(1, 3000) g`)
			db.Exec(t, `INSERT INTO orders SELECT g % 3000, g, g % 97 FROM generate_series(1, 6000) g`)
			db.Exec(t, `ANALYZE users; ANALYZE orders`)
		}
	}
	if withTemporal {
		tt := pgtest.Temporal(t)
		wc.Temporal = devenv.TemporalConfig{Address: tt.Address(), Namespace: devenv.Namespace, UI: tt.UIURL()}
		c.ui = tt.UIURL()
		tc, err := client.Dial(client.Options{HostPort: tt.Address(), Namespace: devenv.Namespace})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tc.Close)
		c.tc = tc
	}
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	c.config = filepath.Join(t.TempDir(), "reshard.yaml")
	if err := os.WriteFile(c.config, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *testCluster) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	args = withShortWALWindow(args)
	return run(t, append([]string{args[0], "--config", c.config}, args[1:]...)...)
}

// withShortWALWindow adds --wal-window 200ms to args when they are a
// migration verb or its plan that sets no window of its own. The capacity
// probe that every plan and start runs watches each shard's WAL for the
// window, 2 s by default: the tests' shards are idle, and those 2 s per
// command added up to about half a minute of the package's time.
func withShortWALWindow(args []string) []string {
	verb := args[0]
	if verb == "plan" && len(args) > 1 {
		verb = args[1]
	}
	switch workflows.Kind(verb) {
	case workflows.KindAddNode, workflows.KindSplit, workflows.KindRemoveNode, workflows.KindMove, workflows.KindRebalance:
	default:
		return args
	}
	for _, a := range args {
		if a == "--wal-window" || strings.HasPrefix(a, "--wal-window=") {
			return args
		}
	}
	return append(slices.Clip(args), "--wal-window", "200ms")
}

// mustPlan runs a plan command and wants its exit code.
func (c *testCluster) mustPlan(t *testing.T, code int, args ...string) string {
	t.Helper()
	out, got := c.run(t, args...)
	if got != code {
		t.Errorf("reshard %s: exit %d, want %d\n%s", strings.Join(args, " "), got, code, out)
	}
	return out
}

func (c *testCluster) slots(t *testing.T) int64 {
	var n int64
	for _, db := range c.shards {
		n += db.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`)
	}
	return n
}

func TestInitAndPlan(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, false)

	out, code := c.run(t, "init", "--shards", "shard1,shard2")
	if code != 0 || !strings.Contains(out, "published topology v1") || !strings.Contains(out, "configured but not in the ring: shard3") {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "init")
	if code != 0 || !strings.Contains(out, "topology exists: v1") {
		t.Fatalf("init again: exit %d\n%s", code, out)
	}
	store := topology.NewStore(c.control.Pool)
	ctx := context.Background()
	topo, err := store.Current(ctx)
	if err != nil || topo.Version != 1 || strings.Join(topo.Ring.Shards(), ",") != "shard1,shard2" || topo.Ring.Len() != 32 {
		t.Fatalf("topology after init: %v, v%d %v (%d vnodes)", err, topo.Version, topo.Ring.Shards(), topo.Ring.Len())
	}
	reg, err := store.Shards(ctx)
	if err != nil || len(reg) != 2 || reg[0].State != topology.ShardActive || reg[0].Conn.Port != uint16(c.shards[reg[0].Name].Server.Port) {
		t.Fatalf("registered shards: %v %+v", err, reg)
	}

	args := []string{"plan", "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--rows-per-sec", "100"}
	out, code = c.run(t, args...)
	if code != 0 {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"plan: add-node shard3 (dry run", "topology v1: 2 shard(s) → 3",
		"(hash mod N: 66.67%, ideal 1/(N+1): 33.33%)", "shard1 → shard3", "shard2 → shard3",
		"ranges (lo exclusive, hi inclusive):", "index advice", `on shard1: CREATE INDEX CONCURRENTLY IF NOT EXISTS "users_reshard_token"`,
		"(at most 2s)",
		"2. fence", "publish topology v3 (compare-and-set on v2)", "preflight passed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
	out, code = c.run(t, append(args, "--json")...)
	var rep planReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("plan --json: exit %d\n%s", code, out)
	}
	if len(rep.Pairs) != 2 || rep.Moved < 0.32 || rep.Moved > 0.35 || rep.Problems != 0 || len(rep.CutoverSteps) < 7 || len(rep.Moves) == 0 {
		t.Errorf("plan JSON: %d pairs, moved %.3f, %d problems, %d cutover lines, %d moves", len(rep.Pairs), rep.Moved, rep.Problems, len(rep.CutoverSteps), len(rep.Moves))
	}
	// Each source gives a sixth of the space: about 1500 of its 9000 rows.
	// Estimates come from statistics, so allow a margin.
	if rep.Rows < 2000 || rep.Rows > 4500 || rep.Bytes <= 0 {
		t.Errorf("estimate %d rows, %d bytes; want about 3000 rows", rep.Rows, rep.Bytes)
	}
	if eta := rep.ETASeconds; eta < 8 || eta > 25 {
		t.Errorf("ETA at 100 rows/s per move: %.0fs, want about 15s", eta)
	}

	// A rebalance: add shard3 and weigh shard1 twice, in one plan. shard1
	// keeps its half; shard2 gives a quarter to shard3. One shard at a time
	// (add-node shard3, then the weight) moves 1/3 + 1/6.
	out, code = c.run(t, "plan", "rebalance", "--add", "shard3", "--weight", "shard1=2", "--table", "users:id", "--table", "orders:user_id", "--json")
	var reb planReport
	if code != 0 || json.Unmarshal([]byte(out), &reb) != nil {
		t.Fatalf("plan rebalance --json: exit %d\n%s", code, out)
	}
	if len(reb.Pairs) != 1 || reb.Pairs[0].Source != "shard2" || reb.Pairs[0].Target != "shard3" || math.Abs(reb.Moved-0.25) > 1e-6 ||
		reb.Steps != 2 || math.Abs(reb.StepMoved-0.5) > 1e-6 || reb.Problems != 0 || reb.Rows <= 0 {
		t.Errorf("plan rebalance: pairs %+v, moved %.4f, one at a time %.4f in %d steps, %d problems, %d rows",
			reb.Pairs, reb.Moved, reb.StepMoved, reb.Steps, reb.Problems, reb.Rows)
	}
	out, code = c.run(t, "plan", "rebalance", "--add", "shard3", "--weight", "shard1=2", "--table", "users:id", "--table", "orders:user_id")
	if code != 0 || !strings.Contains(out, "(one shard at a time: 50.00% in 2 steps") || !strings.Contains(out, "start it with: reshard rebalance --add shard3 --weight shard1=2") {
		t.Errorf("plan rebalance: exit %d\n%s", code, out)
	}

	// The stream during the copy: the default resolves it, once, in the
	// plan's checks: on for integer keys, off for a text key saying why;
	// given, it is refused for the text key (preflight: no probe).
	if !rep.Request.StreamDuringCopy || !rep.Request.StreamAuto || rep.Request.StreamAfterCopy != "" {
		t.Errorf("plan of integer keys: request %+v; want the stream during the copy by default", rep.Request)
	}
	for _, db := range c.shards {
		db.Exec(t, `CREATE TABLE tagged (name text PRIMARY KEY, v int)`)
	}
	c.shards["shard1"].Exec(t, `INSERT INTO tagged SELECT 'k' || g, g FROM generate_series(1, 300) g`)
	tagged := []string{"plan", "add-node", "shard3", "--table", "tagged:name"}
	if out := c.mustPlan(t, 0, append(tagged, "--wal-window", "200ms")...); !strings.Contains(out, "\nstream after the copy: table public.tagged has a text primary key\n") {
		t.Errorf("plan of a text key by default:\n%s", out)
	}
	if out := c.mustPlan(t, 2, append(tagged, "--stream-during-copy")...); !strings.Contains(out, "[stream-during-copy]") ||
		!strings.Contains(out, "public.tagged") || !strings.Contains(out, "--stream-during-copy=false") {
		t.Errorf("plan of a text key with --stream-during-copy:\n%s", out)
	}

	// A broken target: every problem printed with its fix, exit 2, nothing changed.
	c.shards["shard3"].Exec(t, `DROP TABLE orders`)
	c.shards["shard3"].Exec(t, `ALTER TABLE users REPLICA IDENTITY NOTHING`)
	out, code = c.run(t, args...)
	if code != 2 || !strings.Contains(out, "problems (fix these, nothing was changed):") || !strings.Contains(out, "fix: ") ||
		!strings.Contains(out, "orders") || !strings.Contains(out, "REPLICA IDENTITY NOTHING") || !strings.Contains(out, "preflight problem(s): fix these, nothing was changed") {
		t.Errorf("plan with a broken target: exit %d\n%s", code, out)
	}
	if topo, _ := store.Current(ctx); topo.Version != 1 {
		t.Errorf("plan changed the topology: v%d", topo.Version)
	}
	if n := c.slots(t); n != 0 {
		t.Errorf("plan left %d replication slots", n)
	}

	// Input that the topology refuses.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "add-node", "shard1", "--table", "users:id"}, "already has a shard shard1"},
		{[]string{"plan", "add-node", "shard9", "--table", "users:id"}, "not in the configuration"},
		{[]string{"plan", "remove-node", "shard3", "--table", "users:id"}, "has no shard shard3"},
		{[]string{"plan", "split", "shard1", "--into", "shard2", "--table", "users:id"}, "already has a shard shard2"},
		{[]string{"plan", "rebalance", "--add", "shard9", "--table", "users:id"}, "--add shard9 is not in the configuration"},
		{[]string{"plan", "rebalance", "--remove", "shard3", "--table", "users:id"}, "--remove shard3: topology v1 has no shard shard3"},
		{[]string{"init", "--shards", "shard7"}, "not in the configuration"},
	} {
		out, code := c.run(t, tc.args...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("reshard %s: exit %d, output %q; want exit 2 mentioning %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
}

func TestStartMigration(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	ctx := context.Background()
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 3000) // the first migration registers the keyspace: no row may sit on a non-owner
	// No worker runs in this test: workflows stay where they start.
	t.Cleanup(func() {
		for _, id := range []string{"reshard-add-one", "reshard-add-three"} {
			_ = c.tc.TerminateWorkflow(context.Background(), id, "", "test ends")
		}
	})
	out, code := c.run(t, "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--id", "add-one", "--rows-per-sec", "500")
	if code != 0 {
		t.Fatalf("add-node: exit %d\n%s", code, out)
	}
	link := c.ui + "/namespaces/reshard/workflows/reshard-add-one/"
	if !strings.Contains(out, "workflow  reshard-add-one") || !strings.Contains(out, link) || !strings.Contains(out, "/user-metadata\n") {
		t.Errorf("add-node output lacks the workflow id or %s:\n%s", link, out)
	}
	// Left to the default, integer keys stream during the copy: the
	// output says so, and so do the workflow's details.
	if !strings.Contains(out, "\nstream    during the copy (the default where the keyspace allows it)\n") {
		t.Errorf("add-node output does not say the moves stream during the copy:\n%s", out)
	}
	d, err := c.tc.DescribeWorkflow(ctx, "reshard-add-one", "")
	if err != nil {
		t.Fatal(err)
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	summary, _ := d.GetStaticSummary()
	details, _ := d.GetStaticDetails()
	if info.GetType().GetName() != "Migration" || info.GetTaskQueue() != "reshard" ||
		!strings.HasPrefix(summary, "add-node shard3: 2 move(s), 33.") || strings.Contains(summary, "\n") ||
		!strings.Contains(details, "| shard1 | shard3 |") || !strings.Contains(details, "500 rows/s") ||
		!strings.Contains(details, "The moves stream during the copy (the default where the keyspace allows it).") {
		t.Errorf("workflow: type %s, queue %s\nsummary %q\ndetails:\n%s", info.GetType().GetName(), info.GetTaskQueue(), summary, details)
	}
	// The input carries names, never a DSN.
	hist := c.tc.GetWorkflowHistory(ctx, "reshard-add-one", "", false, 0)
	ev, err := hist.Next()
	if err != nil {
		t.Fatal(err)
	}
	input := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().String()
	if !strings.Contains(input, "shard3") || strings.Contains(input, "127.0.0.1") || strings.Contains(input, "postgres") {
		t.Errorf("workflow input: %s", input)
	}

	out, code = c.run(t, "add-node", "shard3", "--id", "add-two")
	if code != 2 || !strings.Contains(out, "migration add-one is running") || !strings.Contains(out, "nothing was started") {
		t.Errorf("overlapping migration: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "list", "--json")
	var rows []control.Migration
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].ID != "add-one" ||
		rows[0].Status != "running" || rows[0].Phase != "PLAN" || !strings.HasPrefix(rows[0].Summary, "add-node shard3") {
		t.Errorf("list: exit %d\n%s", code, out)
	}

	if err := c.tc.TerminateWorkflow(ctx, "reshard-add-one", "", "test"); err != nil {
		t.Fatal(err)
	}
	out, code = c.run(t, "add-node", "shard3", "--id", "add-one")
	if code != 2 || !strings.Contains(out, "migration id add-one is taken") {
		t.Errorf("reused id: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "add-node", "shard3", "--id", "add-three", "--json")
	var started struct {
		ID         string `json:"id"`
		WorkflowID string `json:"workflow_id"`
	}
	// stdout and stderr share out here: no worker runs, and the warning
	// saying so goes to stderr, before the JSON.
	if code != 0 || json.Unmarshal([]byte(out[max(strings.Index(out, "{"), 0):]), &started) != nil || started.ID != "add-three" || started.WorkflowID != "reshard-add-three" {
		t.Fatalf("start after the first ended: exit %d\n%s", code, out)
	}
	// Temporal's visibility store is eventually consistent: a workflow just
	// started may take a moment to be listed.
	listed := func(out string) bool {
		return strings.Contains(out, "add-three") && strings.Contains(out, "terminated") && strings.Index(out, "add-three") < strings.Index(out, "add-one")
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, code = c.run(t, "list")
		if code == 0 && listed(out) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code != 0 || !listed(out) {
		t.Errorf("list, newest first: exit %d\n%s", code, out)
	}

	// Without a worker: status and actions say so, and how to retry.
	out, code = c.run(t, "status", "--timeout", "2s")
	if code != 1 || !strings.Contains(out, "no worker can answer the state query of reshard-add-three") {
		t.Errorf("status without a worker: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "pause", "add-three", "--timeout", "3s", "--request-id", "req-7")
	if code != 1 || !strings.Contains(out, "no reshard worker polls task queue") || !strings.Contains(out, "nothing was sent") {
		t.Errorf("pause without a worker: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "pause", "nosuch", "--timeout", "5s")
	if code != 2 || !strings.Contains(out, "no migration nosuch") {
		t.Errorf("pause of an unknown migration: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "status", "nosuch", "--timeout", "5s")
	if code != 2 || !strings.Contains(out, "no migration nosuch") {
		t.Errorf("status of an unknown migration: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "resume", "add-one", "--timeout", "5s")
	if code != 3 || !strings.Contains(out, "rejected: migration add-one has ended (terminated)") {
		t.Errorf("resume of an ended migration: exit %d\n%s", code, out)
	}
	if n := c.slots(t); n != 0 {
		t.Errorf("starting a workflow without a worker created %d slots", n)
	}
}
