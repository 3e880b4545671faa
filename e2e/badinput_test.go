//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// Tables the bad-input cases name, on every shard, next to users and orders.
const badSchema = `
CREATE TABLE nopk (id bigint NOT NULL, v text);
CREATE TABLE rinothing (id bigint PRIMARY KEY, v text);
ALTER TABLE rinothing REPLICA IDENTITY NOTHING;
CREATE TABLE mism (id bigint PRIMARY KEY, v text);
CREATE TABLE tagged (name text PRIMARY KEY, v int);`

// cli runs the reshard binary with a configuration and returns its output
// (stdout and stderr) and exit code.
func cli(t *testing.T, config string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "--config", config)...)
	cmd.Env = append(append(os.Environ(), "RESHARD_PASSWORD="), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("reshard %v: %v\n%s", args, err, out.String())
	return "", -1
}

// extraServer is a throwaway PostgreSQL server of its own (initdb with
// opts), with a database holding the e2e schema; it returns the database's
// DSN without the password.
func extraServer(t *testing.T, name string, password string, opts devenv.ServerOptions) string {
	t.Helper()
	pg := pgtest.PG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := pgtest.TempDir(t, "e2e-"+name+"-")
	s := devenv.Server{Name: name, Port: port, DataDir: filepath.Join(dir, "data"), Password: devenv.Secret(password)}
	opts.Fast = true
	if err := pg.Init(ctx, s, opts); err != nil {
		t.Fatal(err)
	}
	if err := pg.SetPort(s); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = pg.Kill(ctx, s)
	})
	admin, err := pgx.Connect(ctx, s.DSN("postgres", true))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE shard5`); err != nil {
		t.Fatal(err)
	}
	db, err := pgx.Connect(ctx, s.DSN("shard5", true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, schema+badSchema); err != nil {
		t.Fatal(err)
	}
	return s.DSN("shard5", false)
}

// configWith writes a copy of the cluster's configuration with shard5 at dsn.
func (c *cluster) configWith(t *testing.T, name, dsn string) string {
	t.Helper()
	wc, err := devenv.ReadWorkerConfig(c.config)
	if err != nil {
		t.Fatal(err)
	}
	wc.Shards[shard(5)] = dsn
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.dir, name+".yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// migrations counts the Migration workflows Temporal knows, open or closed.
func (c *cluster) migrations(t *testing.T) int64 {
	t.Helper()
	resp, err := c.tc.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = '%s'", workflows.MigrationWorkflow)})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetCount()
}

// untouched checks that nothing of a migration exists: the topology is still
// v1, no shard has a reshard slot, publication, trigger or schema, and no
// workflow of that id exists.
func (c *cluster) untouched(t *testing.T, id string) { c.untouchedSince(t, id, nil) }

// shardObjects counts what reshard creates on each shard: slots,
// publications, triggers, reshard schemas.
func (c *cluster) shardObjects(t *testing.T) map[string][4]int64 {
	t.Helper()
	out := map[string][4]int64{}
	for name, db := range c.dbs {
		var n [4]int64
		if err := db.Pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM pg_replication_slots WHERE database = current_database()),
			(SELECT count(*) FROM pg_publication),
			(SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal),
			(SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'reshard%')`).Scan(&n[0], &n[1], &n[2], &n[3]); err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	return out
}

// untouchedSince is untouched against the shards' objects in base (nil:
// none at all).
func (c *cluster) untouchedSince(t *testing.T, id string, base map[string][4]int64) {
	t.Helper()
	ctx := context.Background()
	cur, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Version != 1 || len(cur.Migrating()) != 0 || cur.Ring.HasShard(shard(5)) {
		t.Errorf("topology changed: v%d, %d ranges migrating, shard5 in the ring: %v", cur.Version, len(cur.Migrating()), cur.Ring.HasShard(shard(5)))
	}
	for name, n := range c.shardObjects(t) {
		if n != base[name] {
			t.Errorf("%s changed: %d slots, %d publications, %d triggers, %d reshard schemas (before: %v)", name, n[0], n[1], n[2], n[3], base[name])
		}
	}
	if id != "" {
		_, err := c.tc.DescribeWorkflowExecution(ctx, workflows.MigrationWorkflowID(id), "")
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) {
			t.Errorf("workflow %s exists (describe: %v)", workflows.MigrationWorkflowID(id), err)
		}
	}
}

// TestBadInput drives the CLI with input a migration cannot take: each case
// exits 2 with an error naming the problem and its fix, and nothing changes
// (topology v1, no slot, publication, trigger or reshard schema on any
// shard, no workflow started). No worker runs: a started workflow would
// stay, and be counted.
func TestBadInput(t *testing.T) {
	c := newCluster(t, 2_000)
	for _, db := range c.dbs {
		db.Exec(t, badSchema)
	}
	// shard5's mism differs from the sources'; ghost is on the sources only.
	c.dbs[shard(5)].Exec(t, `ALTER TABLE mism ALTER COLUMN v TYPE int USING 0`)
	for i := 1; i <= 4; i++ {
		c.dbs[shard(i)].Exec(t, `CREATE TABLE ghost (id bigint PRIMARY KEY)`)
	}
	users := []string{"--table", "users:id", "--table", "orders:user_id"}
	// A vnode range of shard1 (its first vnode token and the token before it).
	var owned ring.Range
	for _, r := range c.ring.Ranges(shard(1)) {
		if r.Hi > r.Lo+1000 {
			owned = ring.Range{Lo: r.Hi - 1000, Hi: r.Hi}
			break
		}
	}
	replicaDSN := extraServer(t, "walreplica", "", devenv.ServerOptions{ExtraConf: []string{"wal_level = replica"}})
	walConfig := c.configWith(t, "wal-replica", replicaDSN)
	pwDSN := extraServer(t, "password", "right-password", devenv.ServerOptions{})
	pwConfig := c.configWith(t, "password", pwDSN)

	type badCase struct {
		name   string
		config string
		env    []string
		args   []string
		want   []string // in the output, case-sensitive
	}
	add := func(id string, more ...string) []string {
		return append([]string{"add-node", shard(5), "--id", id}, more...)
	}
	cases := []badCase{
		{"no primary key", c.config, nil, add("bad-nopk", "--table", "nopk:id"),
			[]string{"nopk", "primary key", "fix: ", "nothing was started"}},
		{"no primary key (plan)", c.config, nil, []string{"plan", "add-node", shard(5), "--table", "nopk:id"},
			[]string{"nopk", "primary key", "fix: ", "nothing was changed"}},
		{"replica identity nothing", c.config, nil, add("bad-ri", "--table", "rinothing:id"),
			[]string{"REPLICA IDENTITY NOTHING", `ALTER TABLE "public"."rinothing" REPLICA IDENTITY DEFAULT`, "nothing was started"}},
		{"wal_level=replica on the target", walConfig, nil, add("bad-wal", users...),
			[]string{"wal_level is replica on shard5", "ALTER SYSTEM SET wal_level = logical", "nothing was started"}},
		{"wal_level=replica (plan)", walConfig, nil, append([]string{"plan", "add-node", shard(5)}, users...),
			[]string{"wal_level is replica on shard5", "ALTER SYSTEM SET wal_level = logical"}},
		{"unknown shard (add-node)", c.config, nil, append([]string{"add-node", "shard9", "--id", "bad-unknown"}, users...),
			[]string{"add-node shard9 is not in the configuration", "add it there first"}},
		{"unknown shard (move --to)", c.config, nil, append([]string{"move", "--range", "0:1000", "--to", "shard9", "--id", "bad-unknown-to"}, users...),
			[]string{"--to shard9 is not in the configuration", "add it there first"}},
		{"unknown shard (split)", c.config, nil, append([]string{"split", "shard7", "--into", shard(5), "--id", "bad-unknown-split"}, users...),
			[]string{"topology v1 has no shard shard7"}},
		{"wrong password", pwConfig, []string{"RESHARD_PASSWORD=wrong-password"}, add("bad-pw", users...),
			[]string{"connect to shard shard5", "password authentication failed", "the password or user is wrong", "RESHARD_PASSWORD"}},
		{"wrong password (plan)", pwConfig, []string{"RESHARD_PASSWORD=wrong-password"}, append([]string{"plan", "add-node", shard(5)}, users...),
			[]string{"password authentication failed", "the password or user is wrong"}},
		{"schema mismatch", c.config, nil, add("bad-schema", "--table", "mism:id"),
			[]string{`column "v" is text on`, "but integer on shard5", "make the schema of public.mism on shard5 the same", "nothing was started"}},
		{"schema mismatch: table missing on the target", c.config, nil, add("bad-missing", "--table", "users:id", "--table", "ghost:id"),
			[]string{"ghost", "fix: ", "nothing was started"}},
		// A text primary key: the copy gate cannot order it, so
		// --stream-during-copy given is refused (left out, the default
		// streams after the copy: below).
		{"stream during the copy with a text key", c.config, nil, add("bad-sdc-text", "--table", "tagged:name", "--stream-during-copy"),
			[]string{"[stream-during-copy]", "public.tagged", "of type text", "--stream-during-copy=false", "nothing was started"}},
		{"range inverted", c.config, nil, append([]string{"move", "--range", "1000:-1000", "--to", shard(5), "--id", "bad-inverted"}, users...),
			[]string{"lower bound must be below upper bound"}},
		{"range wrapping", c.config, nil, append([]string{"move", "--range", "9000000000000000000:-9000000000000000000", "--to", shard(5), "--id", "bad-wrap"}, users...),
			[]string{"write a wrapping range as two ranges"}},
		{"range empty", c.config, nil, append([]string{"move", "--range", "42:42", "--to", shard(5), "--id", "bad-empty"}, users...),
			[]string{"lower bound must be below upper bound"}},
		{"range outside the token space", c.config, nil, append([]string{"move", "--range", "0:9223372036854775808", "--to", shard(5), "--id", "bad-outside"}, users...),
			[]string{"upper bound", "out of range", "tokens are int64"}},
		{"range already on the target", c.config, nil, append([]string{"move", "--range", fmt.Sprintf("%d:%d", owned.Lo, owned.Hi), "--to", shard(1), "--id", "bad-noop"}, users...),
			[]string{"nothing to move"}},
	}
	before := c.migrations(t)
	for _, tc := range cases {
		start := time.Now()
		out, code := cli(t, tc.config, tc.env, tc.args...)
		t.Logf("%s: exit %d in %s: %s", tc.name, code, time.Since(start).Round(time.Millisecond), lastLines(out, 6))
		if code != 2 {
			t.Errorf("%s: exit %d, want 2\n%s", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q\n%s", tc.name, w, out)
			}
		}
		id := ""
		for i, a := range tc.args {
			if a == "--id" {
				id = tc.args[i+1]
			}
		}
		c.untouched(t, id)
	}
	if n := c.migrations(t); n != before {
		t.Errorf("%d migration workflows started by bad input", n-before)
	}
	// The same keyspace without the flag is no bad input: the default
	// streams after the copy and the plan says why in one line.
	out, code := cli(t, c.config, nil, "plan", "add-node", shard(5), "--table", "tagged:name")
	if code != 0 || !strings.Contains(out, "\nstream after the copy: table public.tagged has a text primary key\n") {
		t.Errorf("plan with a text key and the default: exit %d, want 0 and the stream after the copy, saying why\n%s", code, out)
	}
	c.untouched(t, "")

	// Overlapping migrations: the first is accepted (no worker runs it; as
	// the first migration of a control database from before keyspaces it
	// registers the keyspace, which fences the shards), the second is
	// refused while the first runs, changing nothing more.
	start := time.Now()
	out, code = cli(t, c.config, nil, add("overlap-1", users...)...)
	if code != 0 {
		t.Fatalf("first add-node: exit %d\n%s", code, out)
	}
	base := c.shardObjects(t)
	t.Cleanup(func() {
		// No later test's worker may pick it up.
		_ = c.tc.TerminateWorkflow(context.Background(), workflows.MigrationWorkflowID("overlap-1"), "", "e2e bad input: overlap")
	})
	out, code = cli(t, c.config, nil, add("overlap-2", users...)...)
	t.Logf("overlapping migration: exit %d in %s: %s", code, time.Since(start).Round(time.Millisecond), lastLines(out, 4))
	if code != 2 || !strings.Contains(out, "migration overlap-1 is running") || !strings.Contains(out, "one migration at a time") {
		t.Errorf("second add-node while one runs: exit %d\n%s", code, out)
	}
	if n := c.migrations(t); n != before+1 {
		t.Errorf("%d migration workflows after the overlap, want %d", n, before+1)
	}
	c.untouchedSince(t, "overlap-2", base)
	out, code = cli(t, c.config, nil, append([]string{"move", "--range", fmt.Sprintf("%d:%d", owned.Lo, owned.Hi), "--to", shard(5), "--id", "overlap-3"}, users...)...)
	if code != 2 || !strings.Contains(out, "migration overlap-1 is running") {
		t.Errorf("move while a migration runs: exit %d\n%s", code, out)
	}
	c.untouchedSince(t, "overlap-3", base)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
