package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

// newEmptyCluster is a control database and two shards (shard1, shard2)
// that run ddl, with a configuration naming them; nothing is initialized.
func newEmptyCluster(t *testing.T, ddl string) *testCluster {
	t.Helper()
	c := &testCluster{control: pgtest.NewDB(t, 0), shards: map[string]*pgtest.DB{"shard1": pgtest.NewDB(t, 1), "shard2": pgtest.NewDB(t, 2)}}
	wc := devenv.WorkerConfig{Control: c.control.DSN, Shards: map[string]string{}, Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
	for name, db := range c.shards {
		wc.Shards[name] = db.DSN
		if ddl != "" {
			db.Exec(t, ddl)
		}
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

// A refused init publishes nothing and registers no shard: a typo'd table
// (named with the table it most likely meant and how to create tables), a
// nullable key, a key under a nondeterministic collation, a partitioned
// table, a table of another keyspace. The corrected retry then publishes
// the ring it asks for.
func TestInitRefusedPublishesNothing(t *testing.T) {
	c := newEmptyCluster(t, `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
		CREATE TABLE users (id bigint PRIMARY KEY, name text);
		CREATE TABLE events (id bigserial PRIMARY KEY, user_id bigint);
		CREATE TABLE notes (k text COLLATE ci PRIMARY KEY);
		CREATE TABLE parted (id bigint NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)`)
	ctx := context.Background()
	store := topology.NewStore(c.control.Pool)
	nothing := func(what, keyspace string) {
		t.Helper()
		if _, err := store.In(keyspace).Current(ctx); !errors.Is(err, topology.ErrNoTopology) {
			t.Fatalf("after %s: keyspace %s has a topology (err %v); a refused init must publish nothing", what, keyspace, err)
		}
		if n := c.control.QueryInt64(t, `SELECT count(*) FROM reshard.shards`); n != 0 {
			t.Fatalf("after %s: %d shard(s) registered", what, n)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"typo", []string{"--table", "userz:id"}, []string{"table public.userz exists on no shard", "did you mean public.users?", "deploy/schema.sql", "nothing was published"}},
		{"nullable key", []string{"--table", "users:id", "--table", "events:user_id"}, []string{`ALTER TABLE "public"."events" ALTER COLUMN "user_id" SET NOT NULL`, "nothing was published"}},
		{"nondeterministic collation", []string{"--table", "notes:k"}, []string{"nondeterministic collation public.ci", `COLLATE "C"`}},
		{"partitioned", []string{"--table", "parted:id"}, []string{"public.parted", "is partitioned"}},
	} {
		out, code := c.run(t, append([]string{"init", "--shards", "shard1,shard2", "--vnodes", "4"}, tc.args...)...)
		if code != 2 {
			t.Fatalf("%s: exit %d, want 2\n%s", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Fatalf("%s: output lacks %q\n%s", tc.name, w, out)
			}
		}
		nothing(tc.name, topology.DefaultKeyspace)
	}
	// The corrected retry gets the ring it asks for.
	out, code := c.run(t, "init", "--shards", "shard1", "--vnodes", "8", "--table", "users:id")
	if code != 0 || !strings.Contains(out, "published topology v1") {
		t.Fatalf("corrected init: exit %d\n%s", code, out)
	}
	cur, err := store.Current(ctx)
	if err != nil || cur.Ring.HasShard("shard2") || cur.Ring.Len() != 8 {
		t.Fatalf("topology after the corrected init: %v, %d vnodes, err %v; want shard1 alone with 8 vnodes", cur.Ring.Shards(), cur.Ring.Len(), err)
	}
	// A table of another keyspace: refused before keyspace other gets a ring.
	out, code = c.run(t, "init", "--keyspace", "other", "--shards", "shard2", "--table", "users:id")
	if code != 2 || !strings.Contains(out, "table public.users already belongs to keyspace default") || !strings.Contains(out, "nothing was published") {
		t.Fatalf("init --keyspace other with a table of default: exit %d\n%s", code, out)
	}
	if _, err := store.In("other").Current(ctx); !errors.Is(err, topology.ErrNoTopology) {
		t.Fatalf("keyspace other has a topology after the refused init: %v", err)
	}
	// keyspace add-table refuses the same tables, registering nothing.
	for _, tc := range []struct{ table, want string }{
		{"events:user_id", "SET NOT NULL"},
		{"notes:k", "nondeterministic"},
		{"parted:id", "is partitioned"},
		{"user:id", "did you mean public.users?"},
	} {
		out, code := c.run(t, "keyspace", "add-table", tc.table)
		if code != 2 || !strings.Contains(out, tc.want) || !strings.Contains(out, "nothing was registered") {
			t.Fatalf("add-table %s: exit %d\n%s", tc.table, code, out)
		}
	}
	if n := c.control.QueryInt64(t, `SELECT count(*) FROM reshard.keyspace_tables`); n != 1 {
		t.Fatalf("%d tables registered, want users alone", n)
	}
}

// Rows with a NULL shard key (a key column made nullable after its table
// was registered) are owned by no shard: check placement and topology check
// report them as not placed and exit 1, never as placed.
func TestNullKeyRowsNotPlaced(t *testing.T) {
	ctx := context.Background()
	c := newEmptyCluster(t, `CREATE TABLE users (id bigint PRIMARY KEY);
		CREATE TABLE events (id bigint PRIMARY KEY, user_id bigint NOT NULL)`)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2", "--table", "users:id", "--table", "events:user_id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	for _, db := range c.shards {
		db.Exec(t, `ALTER TABLE events ALTER COLUMN user_id DROP NOT NULL`)
	}
	// Past the fence (a replica-role session), as a row written before the
	// fence refused NULL keys.
	if err := pgx.BeginFunc(ctx, c.shards["shard1"].Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO events VALUES (7, NULL), (8, NULL)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := "shard1     not placed: 2 row(s) of public.events with a NULL shard key, owned by no shard (primary keys 7, 8)"
	for _, verb := range [][]string{{"check", "placement"}, {"topology", "check"}} {
		out, code := c.run(t, verb...)
		if code != 1 || !strings.Contains(out, want) || strings.Contains(out, "shard1     ok") {
			t.Errorf("%v with NULL-key rows: exit %d, want 1 and %q\n%s", verb, code, want, out)
		}
	}
}

// topology check gives a drifting fence's ranges as a share of the token
// space in percent, not as a token count called a fraction.
func TestTopologyCheckGivesShareOfSpace(t *testing.T) {
	c := newEmptyCluster(t, `CREATE TABLE users (id bigint PRIMARY KEY)`)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2", "--vnodes", "1", "--table", "users:id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	c.shards["shard2"].Exec(t, `DROP TRIGGER reshard_fence ON users`)
	out, code := c.run(t, "topology", "check")
	if code != 1 || !strings.Contains(out, "(50.00% of the space)") || regexp.MustCompile(`\d{5,}\.\d+ of the space`).MatchString(out) {
		t.Fatalf("topology check with a dropped fence: exit %d, want 1 and half the space as 50.00%%\n%s", code, out)
	}
}
