package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/workflows"
)

// The password of the cluster's configuration appears nowhere an operator,
// a log collector or Temporal can see: not in any command's help, output or
// error (good and bad input), the worker's debug log, /metrics and the
// health endpoints, any workflow's history (inputs, results, failures,
// search attributes, memos, summaries), nor the control database. The
// servers trust local connections, so the password is never checked: what
// is tested is only where reshard carries it.
func TestNoPasswordAnywhere(t *testing.T) {
	c := newCluster(t, 500)
	secret := fmt.Sprintf("Pw-%d-zQ9xK", time.Now().UnixNano())
	pwFile := filepath.Join(c.dir, "password")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wc, err := devenv.ReadWorkerConfig(c.config)
	if err != nil {
		t.Fatal(err)
	}
	wc.PasswordFile = pwFile
	writeConfig(t, c.config, wc)
	c.logLevel = "debug"
	c.startWorker()

	var seen strings.Builder // everything looked at, labelled
	places := 0
	look := func(what, text string) {
		fmt.Fprintf(&seen, "\n=== %s\n%s", what, text)
		places++
	}
	cli := func(args ...string) string {
		out, code := c.cli(args...)
		look(fmt.Sprintf("reshard %s (exit %d)", strings.Join(args, " "), code), out)
		return out
	}

	// Every command's help, found by walking "Available Commands".
	var walk func(path []string)
	walk = func(path []string) {
		// With the password in every variable reshard or libpq reads: no
		// flag takes its default from them.
		out, code := runBinEnv([]string{"RESHARD_PASSWORD=" + secret, "PGPASSWORD=" + secret,
			"RESHARD_CONTROL_DSN=postgres://postgres:" + secret + "@127.0.0.1:1/x"}, append(path, "--help")...)
		look(fmt.Sprintf("reshard %s --help (exit %d)", strings.Join(path, " "), code), out)
		in := false
		for _, l := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(l, "Available Commands:"):
				in = true
			case in && strings.TrimSpace(l) == "":
				in = false
			case in:
				name := strings.Fields(l)[0]
				if name != "help" && name != "completion" {
					walk(append(append([]string{}, path...), name))
				}
			}
		}
	}
	walk(nil)
	if helps := places; helps < 40 {
		t.Fatalf("%d commands' help found, want every command (40 or more)", helps)
	}

	// A migration, watched and inspected the ways an operator would.
	cli("init", "--table", "users:id", "--table", "orders:user_id")
	// The capacity probe watches the idle shards' WAL for 200 ms, not 2 s
	// (here and in plan remove-node), as the cmd/reshard tests' do.
	if out := cli("add-node", shard(5), "--id", "pwtest", "--grace", "1s", "--wal-window", "200ms"); !strings.Contains(out, "started migration pwtest") {
		t.Fatalf("add-node:\n%s", out)
	}
	if out := cli("status", "pwtest", "--watch", "--interval", "500ms"); !strings.Contains(out, "migration pwtest ended: "+string(workflows.PhaseDone)) {
		t.Fatalf("status --watch:\n%s\n%s", out, c.workerLogs())
	}
	for _, args := range [][]string{
		{"status", "pwtest"}, {"status", "pwtest", "--json"}, {"list"}, {"list", "--json"},
		{"topology", "show"}, {"topology", "history"}, {"topology", "check"}, {"ring", "show"},
		{"check", "placement"}, {"keyspace", "show"}, {"plan", "remove-node", shard(5), "--wal-window", "200ms"},
		{"plan", "rebalance", "--add", shard(5)},
		// Bad input and refused actions: their errors too.
		{"add-node", "nosuch"}, {"status", "nosuch"}, {"pause", "pwtest"}, {"move", "--range", "1:2", "--to", "nosuch"},
	} {
		cli(args...)
	}
	// A control database that refuses connections, and a DSN that holds
	// the password (refused, without printing it).
	bad := wc
	bad.Control = "postgres://postgres@127.0.0.1:1/control?sslmode=disable"
	bad.Shards = map[string]string{}
	for k, v := range wc.Shards {
		bad.Shards[k] = v
	}
	badPath := filepath.Join(c.dir, "bad.yaml")
	writeConfig(t, badPath, bad)
	for _, args := range [][]string{{"topology", "show"}, {"status", "pwtest"}, {"plan", "add-node", shard(5)}} {
		out, code := runBin(append(args, "--config", badPath)...)
		look(fmt.Sprintf("reshard %s, control DB down (exit %d)", strings.Join(args, " "), code), out)
	}
	inDSN := wc
	inDSN.PasswordFile = ""
	inDSN.Control = strings.Replace(wc.Control, "postgres://postgres@", "postgres://postgres:"+url.QueryEscape(secret)+"@", 1)
	writeConfig(t, badPath, inDSN)
	out, code := runBin("topology", "show", "--config", badPath)
	if code != 2 || !strings.Contains(out, "holds a password") {
		t.Errorf("a DSN holding a password: exit %d, want 2 naming it\n%s", code, out)
	}
	look("reshard topology show, password in the DSN", out)

	// The worker's HTTP endpoints and its whole debug log.
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/livez"} {
		resp, err := http.Get("http://" + c.listen + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		look(p, string(b))
	}
	c.stopWorker()
	logs, err := os.ReadFile(filepath.Join(c.dir, "worker1.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("worker log: %v (%d bytes)", err, len(logs))
	}
	look("worker log", string(logs))

	// Every workflow of the namespace: its description and whole history.
	ctx := context.Background()
	resp, err := c.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetExecutions()) < 3 {
		t.Fatalf("%d workflows listed, want the migration and its moves", len(resp.GetExecutions()))
	}
	for _, e := range resp.GetExecutions() {
		id, run := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
		d, err := c.tc.DescribeWorkflowExecution(ctx, id, run)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := protojson.Marshal(d)
		look("describe "+id, string(b))
		hist := &historypb.History{}
		it := c.tc.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			hist.Events = append(hist.Events, ev)
		}
		b, _ = protojson.Marshal(hist)
		look(fmt.Sprintf("history %s (%d events)", id, len(hist.Events)), string(b))
	}

	// The control database, every table of the reshard schema.
	rows, err := c.ctl.Pool.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = 'reshard' AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	for _, tb := range tables {
		var text string
		if err := c.ctl.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(string_agg(t::text, E'\n'), '') FROM reshard.%q t`, tb)).Scan(&text); err != nil {
			t.Fatal(err)
		}
		look("reshard."+tb, text)
	}

	all := seen.String()
	for _, form := range []string{secret, url.QueryEscape(secret), strings.ToLower(secret)} {
		if i := strings.Index(all, form); i >= 0 {
			section := all[:i]
			section = section[strings.LastIndex(section, "\n=== ")+1:]
			t.Errorf("the password appears in %s", strings.SplitN(section, "\n", 2)[0])
		}
	}
	// The secret check can fail: the password is really in what we read
	// where it should be (the password file), and the text is not empty.
	if !regexp.MustCompile(`history reshard-pwtest `).MatchString(all) || len(all) < 100_000 {
		t.Fatalf("looked at %d bytes, not the migration's history: the check would prove nothing", len(all))
	}
	t.Logf("looked at %d bytes in %d places: no password", len(all), places)
}

// runBin runs the reshard binary as an operator would, with no password in
// the environment; it returns the output and the exit code.
func runBin(args ...string) (string, int) { return runBinEnv([]string{"RESHARD_PASSWORD="}, args...) }

// runBinEnv is runBin with env added to the environment.
func runBinEnv(env []string, args ...string) (string, int) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		return string(out) + err.Error(), -1
	}
	return string(out), 0
}

// writeConfig writes a worker configuration file.
func writeConfig(t *testing.T, path string, wc devenv.WorkerConfig) {
	t.Helper()
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
