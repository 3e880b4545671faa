package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/planview"
	"github.com/reshard/reshard/request"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

func defaultMigrationFlags() migrationFlags {
	return migrationFlags{Options: defaultOptions()}
}

// defaultOptions are the flags' defaults, two tables named.
func defaultOptions() request.Options {
	return request.Options{Tables: []string{"users:id", "app.orders:user_id"}, VNodes: 16, Tokens: "balanced", ChunkRows: 5000, VerifyChunkRows: 50000,
		OnVerifyFail: "wait", Grace: workflows.DefaultGracePeriod, CutoverBudget: 2 * time.Second, MaxLagBytes: 16 << 20}
}

// --grace defaults to the workflow's default, and --grace 0s reaches the
// workflow as 0 (clean up right after cutover), not as unset (the default).
func TestGraceFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
		json string
	}{
		{nil, workflows.DefaultGracePeriod, `"grace_period":3600000000000`},
		{[]string{"--grace", "0s"}, 0, `"grace_period":0`},
		{[]string{"--grace", "15m"}, 15 * time.Minute, `"grace_period":900000000000`},
	} {
		var f migrationFlags
		cmd := &cobra.Command{}
		f.register(cmd, workflows.KindAddNode, false)
		if def := cmd.Flags().Lookup("grace").DefValue; def != workflows.DefaultGracePeriod.String() {
			t.Fatalf("--grace default %s, want the workflow's %s", def, workflows.DefaultGracePeriod)
		}
		if err := cmd.ParseFlags(append([]string{"--table", "users:id"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		req, err := buildRequest(workflows.KindAddNode, []string{"s5"}, f)
		if err != nil {
			t.Fatal(err)
		}
		if req.GracePeriod == nil || *req.GracePeriod != tc.want || req.Grace() != tc.want {
			t.Errorf("%v: grace period %v (Grace %s), want %s", tc.args, req.GracePeriod, req.Grace(), tc.want)
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.json) {
			t.Errorf("%v: request %s, want it to carry %s", tc.args, b, tc.json)
		}
	}
}

// Flag errors and local validation exit 2 before any file or server is read.
func TestMigrationVerbsBadInputIsUsageError(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"add-node", "--table", "users:id"}, "takes one shard name"},
		{[]string{"split", "shard1", "--table", "users:id"}, "needs --into"},
		{[]string{"move", "--range", "1:2", "--table", "users:id"}, "needs --range lo:hi and --to"},
		{[]string{"add-node", "s5", "--table", "u:id", "--on-verify-fail", "maybe"}, "--on-verify-fail"},
		{[]string{"add-node", "s5", "--table", "u:id", "--grace", "soon"}, "invalid argument"},
		{[]string{"plan", "add-node", "--table", "users:id"}, "takes one shard name"},
		{[]string{"plan", "split", "s1", "--table", "users:id", "--id", "x"}, "unknown flag: --id"},
		{[]string{"throttle", "m1"}, "give --rows-per-sec, --bytes-per-sec, --copy-chunk-rows and/or adaptive limits"},
		{[]string{"throttle", "m1", "--max-replica-lag", "10ms"}, "--max-replica-lag 10ms: want 0 (not watched) or 100ms or more"},
		{[]string{"throttle", "m1", "--rows-per-sec", "-5", "--max-replica-lag", "2s"}, "want 0 or more"},
		{[]string{"add-node", "s5", "--table", "u:id", "--max-source-latency-increase", "-1"}, "--max-source-latency-increase -1"},
		{[]string{"add-node", "s5", "--table", "u:id", "--max-slot-wal", "1000"}, "--max-slot-wal 1000: want 0 (not watched) or 16 MiB"},
		{[]string{"add-node", "s5", "--table", "u:id", "--max-probe-latency", "5ms", "--probe-query", "SELECT 1; SELECT 2"}, "want one statement"},
		{[]string{"add-node", "s5", "--table", "u:id", "--probe-query", "SELECT 1"}, "--probe-query without a limit"},
		{[]string{"throttle", "m1", "--rows-per-sec", "-5"}, "want 0 or more"},
		{[]string{"pause"}, "accepts 1 arg"},
		{[]string{"pause", "Bad_ID"}, "migration id"},
		{[]string{"status", "a", "b"}, "accepts at most 1 arg"},
		{[]string{"list", "--limit", "0"}, "--limit"},
		{[]string{"init", "--vnodes", "0"}, "--vnodes"},
		{[]string{"init", "--tokens", "x"}, "--tokens"},
	} {
		out, code := run(t, append([]string{"--state-dir", t.TempDir()}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("reshard %s: exit %d, output %q; want exit 2 mentioning %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
	// A missing configuration names the fix.
	out, code := run(t, "--state-dir", t.TempDir(), "add-node", "s5", "--table", "users:id")
	if code != 2 || !strings.Contains(out, "reshard dev up") {
		t.Errorf("no config: exit %d, output %q; want exit 2 pointing at reshard dev up", code, out)
	}
}

func TestValidateConfig(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := func() devenv.WorkerConfig {
		return devenv.WorkerConfig{
			Control:      "postgres://postgres@127.0.0.1:5432/reshard?sslmode=disable",
			Shards:       map[string]string{"shard1": "postgres://postgres@127.0.0.1:5433/reshard", "shard2": "host=127.0.0.1 port=5434 dbname=reshard user=postgres"},
			PasswordEnv:  "RESHARD_TEST_PW",
			PasswordFile: pwFile,
			Temporal:     devenv.TemporalConfig{Address: "127.0.0.1:7233", UI: "http://127.0.0.1:8233/"},
		}
	}
	t.Setenv(PasswordEnvVar, "")
	t.Setenv("RESHARD_TEST_PW", "")
	c, err := validateConfig("f.yaml", good())
	if err != nil {
		t.Fatal(err)
	}
	if c.password != "from-file" || c.Temporal.Namespace != devenv.Namespace || c.uiLink("reshard-x", "") != "http://127.0.0.1:8233/namespaces/reshard/workflows/reshard-x" {
		t.Errorf("password %q (want from-file), namespace %q, link %q", c.password, c.Temporal.Namespace, c.uiLink("reshard-x", ""))
	}
	// With the run id: the User Metadata tab, where the progress is (a
	// Move's id has a "/").
	if got, want := c.uiLink("reshard-x/x_m1", "01a2-b3"), "http://127.0.0.1:8233/namespaces/reshard/workflows/reshard-x%2Fx_m1/01a2-b3/user-metadata"; got != want {
		t.Errorf("link %q, want %q", got, want)
	}
	if got := strings.Join(c.ShardNames(), ","); got != "shard1,shard2" {
		t.Errorf("shard names %s", got)
	}
	t.Setenv("RESHARD_TEST_PW", "from-env")
	if c, _ = validateConfig("f.yaml", good()); c.password != "from-env" {
		t.Errorf("password_env: got %q", c.password)
	}
	t.Setenv(PasswordEnvVar, "from-reshard")
	if c, _ = validateConfig("f.yaml", good()); c.password != "from-reshard" {
		t.Errorf("%s: got %q", PasswordEnvVar, c.password)
	}
	cfg, err := c.connConfig(c.Shards["shard1"])
	if err != nil || cfg.ConnConfig.Password != "from-reshard" {
		t.Errorf("connConfig: password %q, %v", cfg.ConnConfig.Password, err)
	}
	t.Setenv(PasswordEnvVar, "")
	t.Setenv("RESHARD_TEST_PW", "")

	for _, tc := range []struct {
		edit func(*devenv.WorkerConfig)
		want string
	}{
		// Every field's check: devenv's TestCheck; here, that a refused
		// field is a usage error naming the file.
		{func(w *devenv.WorkerConfig) { w.Control = "postgres://postgres:hunter2@h/db" }, "configuration f.yaml: control: postgres://postgres:xxxxx@h/db holds a password"},
		{func(w *devenv.WorkerConfig) { w.PasswordFile = filepath.Join(dir, "missing") }, "password_file"},
		{func(w *devenv.WorkerConfig) {
			w.Standbys = map[string]string{"shard1": "postgres://h/db?password=hunter2"}
		}, "shards.shard1.standby"},
		{func(w *devenv.WorkerConfig) { w.Standbys = map[string]string{"shard9": "postgres://h/db"} }, "shards.shard9.standby"},
	} {
		w := good()
		tc.edit(&w)
		_, err := validateConfig("f.yaml", w)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want a usage error mentioning %q", err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error prints the password: %v", err)
		}
	}
	// A shard's standby, for --read-from standby.
	w0 := good()
	w0.Standbys = map[string]string{"shard2": "postgres://postgres@127.0.0.1:5435/reshard"}
	if c, err := validateConfig("f.yaml", w0); err != nil || c.Standbys["shard2"] != w0.Standbys["shard2"] || len(c.Standbys) != 1 {
		t.Errorf("a standby: %v, standbys %v", err, c.Standbys)
	}
	// No password source at all: trust or ~/.pgpass.
	w := good()
	w.PasswordEnv, w.PasswordFile = "", ""
	if c, err := validateConfig("f.yaml", w); err != nil || c.password != "" {
		t.Errorf("no password source: %v, password %q", err, c.password)
	}
}

// TestPlanMigrationRebalance: reshard plan rebalance plans 4 → 8 as one
// change and prints it against four add-nodes.
func TestPlanMigrationRebalance(t *testing.T) {
	r, err := ring.Build([]ring.Shard{{Name: "shard1"}, {Name: "shard2"}, {Name: "shard3"}, {Name: "shard4"}}, ring.Options{VNodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.New(r, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &clusterConfig{Path: "c.yaml", Shards: map[string]string{}}
	for i := 1; i <= 8; i++ {
		cfg.Shards[fmt.Sprintf("shard%d", i)] = ""
	}
	req := workflows.MigrationRequest{ID: "m", Kind: workflows.KindRebalance, Add: []string{"shard5", "shard6", "shard7", "shard8"}, VNodes: 16, Tokens: "balanced"}
	p, err := planMigration(cfg, topo, nil, req)
	if err != nil {
		t.Fatal(err)
	}
	if p.Moved < 0.49 || p.Moved > 0.51 || p.Steps != 4 || p.StepMoved < 0.634 || p.StepMoved > 0.635 {
		t.Errorf("4 → 8: moved %.4f (want 0.50), one at a time %.4f in %d steps (want 0.6345 in 4)", p.Moved, p.StepMoved, p.Steps)
	}
	if len(p.Pairs) != 4 {
		t.Errorf("4 → 8 in %d (source, target) pairs, want 4: %+v", len(p.Pairs), p.Pairs)
	}
	targets := map[string]bool{}
	for _, pr := range p.Pairs {
		targets[pr.Target] = true
		if pr.Fraction < 0.124 || pr.Fraction > 0.126 {
			t.Errorf("pair %s → %s moves %.4f, want 0.125", pr.Source, pr.Target, pr.Fraction)
		}
	}
	if len(targets) != 4 {
		t.Errorf("targets %v", targets)
	}
	rep := planReport{Request: p.Request, What: p.What(), ShardsBefore: r.Shards(), ShardsAfter: p.After.Shards(), Moved: p.Moved,
		Ideal: p.Ideal, Moves: p.Moves, Steps: p.Steps, StepMoved: p.StepMoved, CutoverSteps: []string{"fence"}}
	for _, pr := range p.Pairs {
		rep.Pairs = append(rep.Pairs, planview.PairReport{Pair: pr})
	}
	var out bytes.Buffer
	planview.Write(&out, rep)
	for _, want := range []string{"plan: rebalance: add shard5,shard6,shard7,shard8", "moved 50.00% of the token space  (one shard at a time: 63.45% in 4 steps",
		"4 shard(s) → 8", "start it with: reshard rebalance --add shard5,shard6,shard7,shard8"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(b), `"one_at_a_time_steps":4`) || !strings.Contains(string(b), `"kind":"rebalance"`) {
		t.Errorf("json %s: %v", b, err)
	}
	// Add, remove and reweigh at once, with the registry's weights.
	mixed := req
	mixed.Add, mixed.Remove, mixed.Weights = []string{"shard5"}, []string{"shard1"}, map[string]float64{"shard2": 2}
	if p, err = planMigration(cfg, topo, []ring.Shard{{Name: "shard3", Weight: 1}}, mixed); err != nil || p.Moved < 0.3499 || p.Moved > 0.3501 || p.Steps != 3 {
		t.Errorf("add shard5, remove shard1, shard2=2: %v, moved %.4f in one plan, %d steps", err, p.Moved, p.Steps)
	}
	for _, tc := range []struct {
		edit func(*workflows.MigrationRequest)
		want string
	}{
		{func(r *workflows.MigrationRequest) { r.Add = []string{"shard1"} }, "--add shard1: topology v0 already has a shard shard1"},
		{func(r *workflows.MigrationRequest) { r.Add = []string{"shard9"} }, "--add shard9 is not in the configuration"},
		{func(r *workflows.MigrationRequest) { r.Add, r.Remove = nil, []string{"shard9"} }, "--remove shard9: topology v0 has no shard shard9"},
		{func(r *workflows.MigrationRequest) { r.Weights = map[string]float64{"shard9": 2} }, "--weight shard9"},
		{func(r *workflows.MigrationRequest) {
			r.Add, r.Remove = nil, []string{"shard1", "shard2", "shard3", "shard4"}
		}, "every shard"},
	} {
		bad := req
		tc.edit(&bad)
		_, err := planMigration(cfg, topo, nil, bad)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rebalance %v %v %v: error %v, want a usage error mentioning %q", bad.Add, bad.Remove, bad.Weights, err, tc.want)
		}
	}
}

func TestPlanMigrationChecks(t *testing.T) {
	r, err := ring.Build([]ring.Shard{{Name: "shard1"}, {Name: "shard2"}, {Name: "shard3"}, {Name: "shard4"}}, ring.Options{VNodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.New(r, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	topo.Version = 3
	cfg := &clusterConfig{Path: "c.yaml", Shards: map[string]string{"shard1": "", "shard2": "", "shard3": "", "shard4": "", "shard5": ""}}
	req := func(kind workflows.Kind, shard string) workflows.MigrationRequest {
		return workflows.MigrationRequest{ID: "m", Kind: kind, Shard: shard, VNodes: 16, Tokens: "balanced"}
	}
	p, err := planMigration(cfg, topo, nil, req(workflows.KindAddNode, "shard5"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Moved < 0.19 || p.Moved > 0.21 || p.Ideal != 0.2 || p.Modulo != 0.8 {
		t.Errorf("add-node to 4 shards: moved %.4f (want ~0.2), ideal %.2f, modulo %.2f", p.Moved, p.Ideal, p.Modulo)
	}
	if len(p.Pairs) != 4 {
		t.Errorf("add-node: %d pairs, want one from each shard: %+v", len(p.Pairs), p.Pairs)
	}
	var sum float64
	for _, pr := range p.Pairs {
		if pr.Target != "shard5" {
			t.Errorf("pair %s → %s", pr.Source, pr.Target)
		}
		sum += pr.Fraction
	}
	if d := sum - p.Moved; d > 1e-9 || d < -1e-9 {
		t.Errorf("pairs cover %.6f, moves %.6f", sum, p.Moved)
	}
	if !strings.Contains(p.Summary(), "add-node shard5: 4 move(s), 20.") || !strings.Contains(p.Details(), "| shard1 | shard5 |") {
		t.Errorf("summary %q\ndetails:\n%s", p.Summary(), p.Details())
	}

	split := req(workflows.KindSplit, "shard2")
	split.Into = "shard5"
	if p, err = planMigration(cfg, topo, nil, split); err != nil || len(p.Pairs) != 1 || p.Pairs[0].Source != "shard2" || p.Moved < 0.12 || p.Moved > 0.13 {
		t.Errorf("split shard2: %v, %+v", err, p)
	}
	mv := req(workflows.KindMove, "")
	mv.Range, mv.To = &ring.Range{Lo: 0, Hi: 1 << 40}, "shard2"
	if p, err = planMigration(cfg, topo, nil, mv); err != nil || p.Ideal != p.Moved || p.Modulo != 0 {
		t.Errorf("move: %v, %+v", err, p)
	}

	for _, tc := range []struct {
		req  workflows.MigrationRequest
		want string
	}{
		{req(workflows.KindAddNode, "shard1"), "already has a shard shard1"},
		{req(workflows.KindAddNode, "shard9"), "not in the configuration"},
		{req(workflows.KindRemoveNode, "shard9"), "has no shard shard9"},
		{func() workflows.MigrationRequest {
			r := req(workflows.KindSplit, "shard1")
			r.Into = "shard2"
			return r
		}(), "already has a shard shard2"},
		{func() workflows.MigrationRequest {
			r := req(workflows.KindSplit, "shard1")
			r.Into = "shard9"
			return r
		}(), "not in the configuration"},
		{func() workflows.MigrationRequest {
			r := req(workflows.KindMove, "")
			r.Range, r.To = &ring.Range{Lo: 0, Hi: 10}, "shard9"
			return r
		}(), "not in the configuration"},
	} {
		_, err := planMigration(cfg, topo, nil, tc.req)
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want a usage error mentioning %q", tc.req.Kind, tc.req.Shard, err, tc.want)
		}
	}
	// A migration in progress in the topology is refused.
	rg := r.Ranges("shard1")[0]
	busy, err := topology.New(r, []topology.RangeState{{Range: rg, Status: topology.Migrating, From: "shard1", To: "shard2", Owner: "shard1"}}, "busy")
	if err != nil {
		t.Fatal(err)
	}
	busy = busy.WithMigrationID("add-abc")
	if _, err := planMigration(cfg, busy, nil, req(workflows.KindAddNode, "shard5")); err == nil || !strings.Contains(err.Error(), "migration add-abc") {
		t.Errorf("migrating topology: %v", err)
	}
}

func TestRequestIDAndExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{errors.New("x"), 1},
		{usageError{errors.New("x")}, 2},
		{rejectedError{"already paused"}, 3},
		{fmt.Errorf("wrapped: %w", rejectedError{"no"}), 3},
	} {
		if got := exitCode(tc.err); got != tc.code {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.code)
		}
	}
	if got := (rejectedError{"already paused"}).Error(); got != "rejected: already paused" {
		t.Errorf("message %q", got)
	}
}

func TestStatusView(t *testing.T) {
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	st := workflows.MigrationState{
		Request: workflows.MigrationRequest{Kind: workflows.KindAddNode, Shard: "shard5", Throttle: workflows.Throttle{RowsPerSec: 100},
			StreamAuto: true, StreamAfterCopy: "table public.tags has a text primary key"},
		Phase:       workflows.PhaseSnapshotCopy,
		FromVersion: 1, Version: 2, MovedFraction: 0.2,
		Throttle: &workflows.Throttle{RowsPerSec: 25}, // changed live by reshard throttle
		Moves: []workflows.MoveState{
			{Spec: workflows.MoveSpec{Source: "shard1", Target: "shard5", EstRows: 1000}, Phase: workflows.PhaseSnapshotCopy, RowsCopied: 250,
				Timings: []workflows.PhaseTiming{{Phase: workflows.PhaseSnapshotCopy, Start: start}}, UpdatedAt: start.Add(10 * time.Second)},
			{Spec: workflows.MoveSpec{Source: "shard2", Target: "shard5", EstRows: 800}, Phase: workflows.PhaseVerify, RowsCopied: 800, CopyDone: true, LagBytes: 2048,
				Verify: &workflows.VerifySummary{Passed: false, Mismatches: 2, Samples: []string{"missing users id=42"}}},
			{Spec: workflows.MoveSpec{Source: "shard3", Target: "shard5", EstRows: 10}, Phase: workflows.PhaseGrace, RowsCopied: 10, CopyDone: true,
				Verify: &workflows.VerifySummary{Passed: true, Rows: 10}, WritePause: 412 * time.Millisecond, Attempts: 2, Paused: true,
				Pauses:     workflows.WritePauses{Total: 2412 * time.Millisecond, Longest: 2 * time.Second, Attempts: 2},
				GraceUntil: start.Add(10*time.Second + 5*time.Minute)},
			{Spec: workflows.MoveSpec{Source: "shard4", Target: "shard5", EstRows: 10}, Phase: workflows.PhaseCutover, RowsCopied: 10, CopyDone: true,
				Verify: &workflows.VerifySummary{Passed: true, Rows: 10}, Waiting: workflows.WaitApproval},
		},
	}
	var b strings.Builder
	statusview.Print(&b, "add-x", "http://ui/x", st, start.Add(10*time.Second))
	out := b.String()
	for _, want := range []string{
		"migration add-x  SNAPSHOT_COPY  topology v1 → v2  moving 20.00%",
		"add-node shard5  throttle 25 rows/s  stream after the copy: table public.tags has a text primary key",
		"shard1 → shard5", "[=====               ]  25%", "250/1000 rows", "30s", // 25 rows/s so far, 750 left
		"FAILED: 2 mismatch(es) e.g. missing users id=42", "2.0 KiB",
		"GRACE (paused; until 2026-01-01T10:05:10Z; reshard complete ends it now)", "passed (10 rows)", "2.412s over 2 attempts (longest 2s)",
		"CUTOVER (waiting for approval: reshard approve)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	// Plain --watch lines: only what changed is printed again.
	var w strings.Builder
	last := map[string]string{}
	statusview.PrintChanges(&w, st, last, start)
	first := strings.Count(w.String(), "\n")
	st.Moves[0].RowsCopied = 500
	statusview.PrintChanges(&w, st, last, start)
	if first != 5 || strings.Count(w.String(), "\n") != 6 || !strings.Contains(w.String(), "500/1000 rows") {
		t.Errorf("watch lines (first %d):\n%s", first, w.String())
	}
	// The lag of a stream that stopped at the cutover is not shown as if
	// current (main showed "56 B" on a DONE move).
	for _, p := range []workflows.Phase{workflows.PhaseGrace, workflows.PhaseCleanup, workflows.PhaseDone, workflows.PhaseRolledBack} {
		if v := statusview.ViewMove(workflows.MoveState{Phase: p, LagBytes: 56}, workflows.Throttle{}, start); v.Lag != "-" {
			t.Errorf("lag of a move in %s: %q, want -", p, v.Lag)
		}
	}
	if v := statusview.ViewMove(workflows.MoveState{Phase: workflows.PhaseCDCCatchUp}, workflows.Throttle{}, start); v.Lag != "0 B" {
		t.Errorf("lag of a move catching up with none left: %q, want 0 B", v.Lag)
	}
	if got := statusview.ViewMove(workflows.MoveState{Spec: workflows.MoveSpec{EstRows: 1000}}, workflows.Throttle{RowsPerSec: 100}, start).ETA; got != "10s" {
		t.Errorf("ETA from the throttle before any row: %s", got)
	}
	if got := statusview.TextBar(2000, 1000, 10); got != "[==========] 100%" {
		t.Errorf("bar over the estimate: %q", got)
	}
}

// The terminal --watch view: one bar per move, texts from the last state.
func TestBarView(t *testing.T) {
	var buf bytes.Buffer
	v := statusview.NewBars(&buf, "add-x")
	st := workflows.MigrationState{Phase: workflows.PhaseSnapshotCopy, Moves: []workflows.MoveState{
		{Spec: workflows.MoveSpec{Source: "shard1", Target: "shard5", EstRows: 1000}, Phase: workflows.PhaseSnapshotCopy, RowsCopied: 100},
		{Spec: workflows.MoveSpec{Source: "shard2", Target: "shard5", EstRows: 1200}, Phase: workflows.PhaseVerify, RowsCopied: 1000, CopyDone: true},
	}}
	v.Update("add-x", st, time.Now())
	time.Sleep(300 * time.Millisecond)
	st.Moves[0].RowsCopied = 500
	v.Update("add-x", st, time.Now())
	v.Stop()
	out := buf.String()
	// The percentage ends the bar's line, the rows open the figures' line
	// under it (d914167).
	for _, want := range []string{"migration add-x  SNAPSHOT_COPY", "shard1 → shard5", "SNAPSHOT_COPY", " 50%\n    500/1000 rows", "shard2 → shard5", "VERIFY", "100%\n    1000/1200 rows"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar view lacks %q:\n%q", want, out)
		}
	}
}

// A password from the environment reaches connections, never the output.
func TestPasswordNeverPrinted(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "reshard.yaml")
	// Port 1: nothing listens, the connection fails after the password was set.
	yaml := "control: postgres://postgres@127.0.0.1:1/reshard?sslmode=disable\nshards:\n  shard1: postgres://postgres@127.0.0.1:1/s1?sslmode=disable\ntemporal:\n  address: 127.0.0.1:1\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PasswordEnvVar, "sekret-pw-123")
	for _, args := range [][]string{
		{"init", "--config", cfg},
		{"plan", "add-node", "shard2", "--config", cfg, "--table", "users:id"},
		{"add-node", "shard2", "--config", cfg, "--table", "users:id"},
		{"init", "--config", cfg, "--log-level", "debug"},
	} {
		out, code := run(t, args...)
		if code == 0 || strings.Contains(out, "sekret-pw-123") {
			t.Errorf("reshard %s: exit %d, output %q: want a failure that does not print the password", strings.Join(args, " "), code, out)
		}
		if !strings.Contains(out, "127.0.0.1:1") {
			t.Errorf("reshard %s: the error does not say where it tried: %q", strings.Join(args, " "), out)
		}
	}
}

// status exits 1 for a migration that ended FAILED or ROLLED_BACK (main
// exited 0 for a watched FAILED one) and 0 for DONE.
func TestEndedBadly(t *testing.T) {
	for _, tc := range []struct {
		phase workflows.Phase
		code  int
		want  string
	}{
		{workflows.PhaseFailed, 1, "migration m failed: boom"},
		{workflows.PhaseRolledBack, 1, "migration m was rolled back"},
		{workflows.PhaseDone, 0, ""},
	} {
		err := endedBadly("m", workflows.MigrationState{Phase: tc.phase, Error: "boom"})
		code := 0
		if err != nil {
			code = exitCode(err)
		}
		if code != tc.code || (tc.want != "" && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: exit %d (%v), want %d with %q", tc.phase, code, err, tc.code, tc.want)
		}
	}
}

// --stream-during-copy left out is the default (on where the keyspace
// allows it, resolved by the plan's checks; off with --read-from standby,
// saying why); given alone or =true it is on, =false off; given with
// --read-from standby it is refused (bad input: exit 2).
func TestStreamDuringCopyFlag(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		on, auto bool
		refused  string
	}{
		{nil, true, true, ""},
		{[]string{"--stream-during-copy"}, true, false, ""},
		{[]string{"--stream-during-copy=true"}, true, false, ""},
		{[]string{"--stream-during-copy=false"}, false, false, ""},
		{[]string{"--read-from", "standby"}, false, true, ""},
		{[]string{"--stream-during-copy", "--read-from", "standby"}, false, false, "--stream-during-copy with --read-from standby"},
		{[]string{"--stream-during-copy=maybe"}, false, false, "want true or false"},
	} {
		var f migrationFlags
		cmd := &cobra.Command{}
		f.register(cmd, workflows.KindAddNode, false)
		err := cmd.ParseFlags(append([]string{"--table", "users:id"}, tc.args...))
		var req workflows.MigrationRequest
		if err == nil {
			req, err = buildRequest(workflows.KindAddNode, []string{"shard5"}, f)
		}
		switch {
		case tc.refused != "":
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%v: error %v, want one mentioning %q", tc.args, err, tc.refused)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case req.StreamDuringCopy != tc.on || req.StreamAuto != tc.auto:
			t.Errorf("%v: stream during copy %v, auto %v; want %v, %v", tc.args, req.StreamDuringCopy, req.StreamAuto, tc.on, tc.auto)
		}
	}
}
