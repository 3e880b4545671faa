package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// schema apply changes every shard of the keyspace, reports each, says
// "already there" on a second run, and refuses a key change with the reason,
// changing nothing.
func TestSchemaApply(t *testing.T) {
	control, s1, s2 := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	for _, db := range []*pgtest.DB{s1, s2} {
		db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text); CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint NOT NULL, total int)`)
	}
	wc := devenv.WorkerConfig{Control: control.DSN, Shards: map[string]string{"shard1": s1.DSN, "shard2": s2.DSN},
		Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "reshard.yaml")
	if err := os.WriteFile(config, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "init", "--config", config, "--shards", "shard1,shard2", "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	out, code := run(t, "schema", "apply", "--config", config, "ALTER TABLE users ADD COLUMN nickname text DEFAULT 'x', ALTER COLUMN name TYPE varchar(100); CREATE INDEX orders_total ON orders (total)")
	t.Logf("schema apply:\n%s", out)
	if code != 0 {
		t.Fatalf("schema apply: exit %d", code)
	}
	for _, want := range []string{"shard1: add column nickname: applied", "shard2: add column nickname: applied", "shard2: change the type of name: applied", "shard1: create index orders_total: applied"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, db := range []*pgtest.DB{s1, s2} {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'users'::regclass AND attname = 'nickname'`); n != 1 {
			t.Errorf("%s lacks users.nickname", db.Name)
		}
	}
	script := filepath.Join(t.TempDir(), "change.sql")
	if err := os.WriteFile(script, []byte("ALTER TABLE users ADD COLUMN nickname text DEFAULT 'x';\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, "schema", "apply", "--config", config, "--file", script)
	if code != 0 || strings.Count(out, "add column nickname: already there") != 2 {
		t.Fatalf("schema apply again: exit %d\n%s", code, out)
	}
	out, code = run(t, "schema", "apply", "--config", config, "ALTER TABLE users ADD COLUMN other int; ALTER TABLE orders ALTER COLUMN user_id TYPE int")
	t.Logf("a key change: exit %d\n%s", code, out)
	if code != 2 || !strings.Contains(out, "user_id is the shard key of public.orders") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("a key change: exit %d, want 2 with the reason\n%s", code, out)
	}
	for _, db := range []*pgtest.DB{s1, s2} {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'users'::regclass AND attname = 'other'`); n != 0 {
			t.Errorf("a refused script changed %s", db.Name)
		}
	}
}
