package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// run executes the CLI in-process and returns its output and exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		out.WriteString(errorText(err))
		return out.String(), exitCode(err)
	}
	return out.String(), 0
}

func TestDevBadInputIsUsageError(t *testing.T) {
	state := pgtest.TempDir(t, "reshard-cmd-")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dev", "up", "--shards", "0"}, "--shards 1 or more"},
		{[]string{"dev", "up", "--shards", "-3"}, "--shards 1 or more"},
		{[]string{"dev", "psql"}, "requires at least 1 arg"},
		{[]string{"dev", "status", "extra"}, "unknown command"},
		{[]string{"dev", "up", "--shards", "many"}, "invalid argument"},
	} {
		out, code := run(t, append([]string{"--state-dir", state}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("reshard %s: exit %d, output %q; want exit 2 mentioning %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
	}
	// Nothing was created by refused commands.
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("a refused command left files in the state directory: %v", entries)
	}
	out, code := run(t, "--state-dir", state, "dev", "status")
	if code != 1 || !strings.Contains(out, "reshard dev up") {
		t.Errorf("status without a cluster: exit %d, output %q; want exit 1 pointing at reshard dev up", code, out)
	}
}

// The whole CLI against a real one-shard cluster: what it prints, psql with
// the password only in the environment, down leaving nothing running.
func TestDevCommands(t *testing.T) {
	if _, err := devenv.NewPG(); err != nil {
		pgtest.Unavailable(t, err)
	}
	if _, err := devenv.FindTemporal(); err != nil {
		pgtest.Unavailable(t, err)
	}
	state := filepath.Join(pgtest.TempDir(t, "reshard-cmd-"), "dev")
	t.Cleanup(func() { _ = devenv.Destroy(context.Background(), state) })

	out, code := run(t, "--state-dir", state, "--log-level", "warn", "dev", "up", "--shards", "1")
	if code != 0 {
		t.Fatalf("dev up: exit %d\n%s", code, out)
	}
	c, err := devenv.Load(state)
	if err != nil {
		t.Fatal(err)
	}
	secret := string(c.Nodes[0].Password)
	for _, want := range []string{"control", "shard1", c.Nodes[1].DSN(devenv.Database, false), c.Nodes[1].DataDir, c.Temporal.Address(), c.Temporal.UIURL(), c.ConfigPath()} {
		if !strings.Contains(out, want) {
			t.Errorf("dev up output lacks %q:\n%s", want, out)
		}
	}

	status, code := run(t, "--state-dir", state, "dev", "status")
	if code != 0 || strings.Count(status, "logical") != 2 || !strings.Contains(status, "answers HTTP 200") {
		t.Fatalf("dev status: exit %d\n%s", code, status)
	}

	again, code := run(t, "--state-dir", state, "--log-level", "warn", "dev", "up")
	if code != 0 || again != out {
		t.Fatalf("second dev up: exit %d, output changed:\n%s\n---\n%s", code, out, again)
	}

	if _, code := run(t, "--state-dir", state, "dev", "psql", "shard9"); code != 2 {
		t.Fatalf("dev psql shard9: exit %d, want 2", code)
	}
	path, argv, env, err := c.PsqlCommand("shard1", []string{"-Atc", "SHOW wal_level"})
	if err != nil {
		pgtest.Unavailable(t, err)
	}
	if strings.Contains(strings.Join(argv, " "), secret) {
		t.Fatalf("psql command line carries the password: %v", argv)
	}
	psql := exec.Command(path, argv[1:]...)
	psql.Env = env
	got, err := psql.CombinedOutput()
	if err != nil || strings.TrimSpace(string(got)) != "logical" {
		t.Fatalf("psql on shard1: %v: %s", err, got)
	}

	down, code := run(t, "--state-dir", state, "dev", "down")
	if code != 0 {
		t.Fatalf("dev down: exit %d\n%s", code, down)
	}
	status, code = run(t, "--state-dir", state, "dev", "status")
	if code != 1 || strings.Contains(status, "running") {
		t.Fatalf("dev status after down: exit %d\n%s", code, status)
	}
	destroyed, code := run(t, "--state-dir", state, "dev", "destroy")
	if code != 0 {
		t.Fatalf("dev destroy: exit %d\n%s", code, destroyed)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("state directory after destroy: %v", err)
	}
	for name, text := range map[string]string{"up": out, "status": status, "down": down, "destroy": destroyed} {
		if strings.Contains(text, secret) {
			t.Fatalf("dev %s printed the password", name)
		}
	}
}
