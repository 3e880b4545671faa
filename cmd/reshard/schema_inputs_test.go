package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/reshard/reshard/tableset"
)

// withoutReshardTriggers drops the triggers that run a function of schema
// reshard (and their firing mode), whatever their names, and keeps an
// application's trigger named reshard_..., as pg_dump writes them.
func TestWithoutReshardTriggers(t *testing.T) {
	script := "\\restrict abc\n" +
		"CREATE TABLE public.users (\n    id bigint NOT NULL\n);\n" +
		"CREATE TRIGGER reshard_audit AFTER INSERT ON public.users FOR EACH ROW EXECUTE FUNCTION public.audit();\n" +
		"CREATE TRIGGER reshard_fence BEFORE INSERT OR DELETE OR UPDATE ON public.users FOR EACH ROW EXECUTE FUNCTION reshard.fence_public_users();\n" +
		"CREATE TRIGGER reshard_no_truncate BEFORE TRUNCATE ON public.users FOR EACH STATEMENT EXECUTE FUNCTION reshard.refuse_truncate();\n" +
		"CREATE TRIGGER \"Fence 2\" BEFORE INSERT ON public.users FOR EACH ROW EXECUTE FUNCTION reshard.fence_x();\n" +
		"ALTER TABLE public.users ENABLE ALWAYS TRIGGER reshard_fence;\n" +
		"ALTER TABLE public.users ENABLE ALWAYS TRIGGER reshard_audit;\n" +
		"\\unrestrict abc\n"
	got := withoutReshardTriggers(script)
	want := "CREATE TABLE public.users (\n    id bigint NOT NULL\n);\n" +
		"CREATE TRIGGER reshard_audit AFTER INSERT ON public.users FOR EACH ROW EXECUTE FUNCTION public.audit();\n" +
		"ALTER TABLE public.users ENABLE ALWAYS TRIGGER reshard_audit;\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// schema sync keeps an application's trigger named reshard_..., names a
// type the target lacks (not the roles) and refuses a partitioned table,
// creating nothing.
func TestSchemaSyncTriggersTypesPartitions(t *testing.T) {
	ctx := context.Background()
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

	// A partitioned table (registered before init refused them): refused
	// before anything is created.
	src.Exec(t, `CREATE TABLE parted (id bigint NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)`)
	spec := tableset.Spec{Name: "default", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "parted", KeyColumn: "id"}}}
	_, _, err := planSchemaSync(ctx, src.Pool, dst.Pool, spec, "shard1", "shard2")
	var u usageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "public.parted on source shard1 is partitioned") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("plan of a partitioned table: %v", err)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname LIKE 'parted%'`); n != 0 {
		t.Fatalf("%d relations of the partitioned table on the target", n)
	}
}
