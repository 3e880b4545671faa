package main

import (
	"strings"
	"testing"
)

// schema sync keeps an application's trigger named reshard_... and names a
// type the target lacks (not the roles), creating nothing (exit 2);
// shardschema's TestSync refuses a partitioned table.
func TestSchemaSyncTriggersTypes(t *testing.T) {
	c := newEmptyCluster(t, "")
	src, dst := c.shards["shard1"], c.shards["shard2"]
	src.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok');
		CREATE TABLE users (id bigint PRIMARY KEY, m mood);
		CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
		CREATE TRIGGER reshard_audit AFTER INSERT ON users FOR EACH ROW EXECUTE FUNCTION audit()`)
	if out, code := c.run(t, "init", "--shards", "shard1", "--table", "users:id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	if n := src.QueryInt64(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'users'::regclass AND tgname = 'reshard_fence'`); n != 1 {
		t.Fatalf("no fence trigger on the source (%d)", n)
	}
	out, code := c.run(t, "schema", "sync", "shard2")
	if code != 2 || !strings.Contains(out, "column public.users.m is of the enum type public.mood, which shard2 lacks") ||
		!strings.Contains(out, "CREATE TYPE public.mood AS ENUM ('sad', 'ok')") || strings.Contains(out, "GRANT") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("schema sync onto a shard without the enum: exit %d\n%s", code, out)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`); n != 0 {
		t.Fatalf("a refused schema sync created %d tables", n)
	}
	dst.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok'); CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$`)
	if out, code := c.run(t, "schema", "sync", "shard2"); code != 0 || !strings.Contains(out, "created public.users on shard2") {
		t.Fatalf("schema sync: exit %d\n%s", code, out)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'users'::regclass AND tgname = 'reshard_audit'`); n != 1 {
		t.Fatal("the application's trigger reshard_audit was not created on the target")
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'users'::regclass AND tgname LIKE 'reshard\_%' AND tgname <> 'reshard_audit'`); n != 0 {
		t.Fatalf("%d of reshard's own triggers copied to the target", n)
	}

}
