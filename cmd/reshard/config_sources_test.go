package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/testkit/pgtest"
)

// commandPaths lists the path of every command of the tree ("" for root).
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	out := [][]string{prefix}
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		out = append(out, commandPaths(sub, append(append([]string{}, prefix...), sub.Name()))...)
	}
	return out
}

// No --help shows a password, whatever the environment holds: a flag whose
// default came from $RESHARD_CONTROL_DSN printed it, password included.
func TestHelpShowsNoSecret(t *testing.T) {
	const pw = "Sup3r-s3cret-pw"
	dsn := "postgres://reshard:" + pw + "@db.example:5432/control?sslmode=disable"
	for _, k := range []string{"RESHARD_CONTROL_DSN", "RESHARD_SOURCE_DSN", "RESHARD_TARGET_DSN"} {
		t.Setenv(k, dsn)
	}
	for _, k := range []string{PasswordEnvVar, "PGPASSWORD", "RESHARD_CONFIG", "RESHARD_STATE_DIR"} {
		t.Setenv(k, pw)
	}
	paths := commandPaths(newRootCmd(), nil)
	if len(paths) < 30 {
		t.Fatalf("walked %d commands; the tree has more", len(paths))
	}
	for _, p := range paths {
		out, code := run(t, append(p, "--help")...)
		if code != 0 || !strings.Contains(out, "Usage:") {
			t.Errorf("reshard %s --help: exit %d\n%s", strings.Join(p, " "), code, out)
		}
		if strings.Contains(out, pw) {
			t.Errorf("reshard %s --help prints the password:\n%s", strings.Join(p, " "), out)
		}
	}
}

// ring show and topology show, history and skew read the control database
// from reshard.yaml, as every other command does (main needed --control-dsn).
func TestTopologyCommandsReadTheConfig(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, false)
	for _, s := range []string{"shard1", "shard2"} {
		c.shards[s].Exec(t, `CREATE TABLE events (id bigint PRIMARY KEY, what text)`)
	}
	if out, code := c.run(t, "init", "--shards", "shard1,shard2", "--table", "events:id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	// An explicit --config wins over the environment's DSN.
	t.Setenv("RESHARD_CONTROL_DSN", "postgres://nobody@127.0.0.1:1/nowhere?sslmode=disable")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ring", "show"}, "topology version 1: 2 shards"},
		{[]string{"topology", "show"}, "shard1"},
		{[]string{"topology", "history"}, "VERSION"},
		{[]string{"topology", "skew", "--table", "users:id", "--interval", "1s"}, "shard2"},
		// No --table, no --key-type: the keyspace's, as registered.
		{[]string{"topology", "skew", "--interval", "1s", "--json"}, `"public.events"`},
	} {
		args := append(append([]string{}, tc.args...), "--config", c.config)
		out, code := run(t, args...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("reshard %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
}
