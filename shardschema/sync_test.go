package shardschema

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// WithoutReshardTriggers drops the triggers that run a function of schema
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
	got := WithoutReshardTriggers(script)
	want := "CREATE TABLE public.users (\n    id bigint NOT NULL\n);\n" +
		"CREATE TRIGGER reshard_audit AFTER INSERT ON public.users FOR EACH ROW EXECUTE FUNCTION public.audit();\n" +
		"ALTER TABLE public.users ENABLE ALWAYS TRIGGER reshard_audit;\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// Sync names a type the target lacks and refuses a partitioned table or a
// table defined otherwise, creating nothing (*pgerr.InputError); then creates the
// missing table from the source's pg_dump, keeping an application trigger
// named reshard_... and leaving reshard's own triggers out, with its token
// index; a second Sync finds it in sync.
func TestSync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 0)
	src.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok');
		CREATE TABLE users (id bigint PRIMARY KEY, m mood);
		CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
		CREATE TRIGGER reshard_audit AFTER INSERT ON users FOR EACH ROW EXECUTE FUNCTION audit();
		CREATE SCHEMA reshard; CREATE FUNCTION reshard.fence_x() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
		CREATE TRIGGER reshard_fence BEFORE INSERT ON users FOR EACH ROW EXECUTE FUNCTION reshard.fence_x()`)
	spec := tableset.Spec{Name: "default", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}
	o := Options{Spec: spec, From: "shard1", Target: "shard2", PGDump: devenv.FindPGDump}
	refused := func(what string, err error, relations int64, wants ...string) {
		t.Helper()
		var in *pgerr.InputError
		if !errors.As(err, &in) {
			t.Fatalf("%s: %v, want a *pgerr.InputError", what, err)
		}
		for _, w := range append(wants, "nothing was changed") {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: %v lacks %q", what, err, w)
			}
		}
		if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname IN ('users', 'parted', 'parted_1')`); n != relations {
			t.Fatalf("%s: the target has %d relations after a refused sync, want %d", what, n, relations)
		}
	}
	_, err := Sync(ctx, src.Pool, dst.Pool, o)
	refused("a target without the enum", err, 0, "column public.users.m is of the enum type public.mood, which shard2 lacks", "CREATE TYPE public.mood AS ENUM ('sad', 'ok')")

	src.Exec(t, `CREATE TABLE parted (id bigint NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)`)
	withParted := o
	withParted.Spec = tableset.Spec{Name: "default", Tables: append(spec.Tables[:1:1], tableset.TableSpec{Table: "parted", KeyColumn: "id"})}
	_, err = Sync(ctx, src.Pool, dst.Pool, withParted)
	refused("a partitioned table", err, 0, "public.parted on source shard1 is partitioned")

	dst.Exec(t, `CREATE TYPE mood AS ENUM ('sad', 'ok'); CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$`)
	dry, err := Sync(ctx, src.Pool, dst.Pool, Options{Spec: spec, From: "shard1", Target: "shard2", DryRun: true})
	if err != nil || len(dry) != 1 || dry[0].Action != "create" || dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname = 'users'`) != 0 {
		t.Fatalf("dry run: %+v, %v (or it created the table)", dry, err)
	}
	got, err := Sync(ctx, src.Pool, dst.Pool, o)
	if err != nil || len(got) != 1 || got[0].Action != "create" || got[0].TokenIndex != tableset.TokenIndexName(tableset.Table{Schema: "public", Name: "users"}) {
		t.Fatalf("sync: %+v, %v", got, err)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'users'::regclass AND tgname = 'reshard_audit'`); n != 1 {
		t.Fatal("the application's trigger reshard_audit was not created on the target")
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'users'::regclass AND tgname = 'reshard_fence'`); n != 0 {
		t.Fatal("reshard's own trigger was copied to the target")
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_indexes WHERE indexname = $1`, got[0].TokenIndex); n != 1 {
		t.Fatalf("no token index %s on the target", got[0].TokenIndex)
	}
	if again, err := Sync(ctx, src.Pool, dst.Pool, o); err != nil || again[0].Action != "in-sync" {
		t.Fatalf("second sync: %+v, %v", again, err)
	}

	dst.Exec(t, `ALTER TABLE users ADD COLUMN extra int`)
	_, err = Sync(ctx, src.Pool, dst.Pool, o)
	refused("a table defined otherwise", err, 1, "shard2 has 1 table(s) defined unlike on shard1")
}
