package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// schema sync gives an empty shard the keyspace's tables as they are on the
// source (columns, defaults and the sequence behind them, constraints,
// indexes) plus token indexes, lists them first with --dry-run, and refuses
// a target whose table differs, changing nothing.
func TestSchemaSync(t *testing.T) {
	ctx := context.Background()
	control, src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	src.Exec(t, `CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE, name text DEFAULT 'anon', created timestamptz NOT NULL DEFAULT now());
CREATE INDEX users_name ON users (name);
CREATE TABLE orders (user_id bigint NOT NULL REFERENCES users (id), id bigint NOT NULL, amount numeric(12,2) CHECK (amount >= 0), PRIMARY KEY (user_id, id))`)
	wc := devenv.WorkerConfig{Control: control.DSN, Shards: map[string]string{"shard1": src.DSN, "shard2": dst.DSN},
		Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "reshard.yaml")
	if err := os.WriteFile(config, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, int) {
		t.Helper()
		return run(t, append([]string{args[0], args[1], "--config", config}, args[2:]...)...)
	}
	if out, code := run(t, "init", "--config", config, "--shards", "shard1", "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	out, code := cli("schema", "sync", "shard2", "--dry-run")
	if code != 0 || !strings.Contains(out, "would create public.users on shard2 (from shard1)") || !strings.Contains(out, "would create public.orders") {
		t.Fatalf("schema sync --dry-run: exit %d\n%s", code, out)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`); n != 0 {
		t.Fatalf("--dry-run created %d tables", n)
	}
	out, code = cli("schema", "sync", "shard2")
	if code != 0 || !strings.Contains(out, "created public.users on shard2") {
		t.Fatalf("schema sync: exit %d\n%s", code, out)
	}
	spec := tableset.Spec{Name: "default", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"}}}
	a, err := tableset.Introspect(ctx, src.Pool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	z, err := tableset.Introspect(ctx, dst.Pool, spec, "target")
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Tables {
		if d := tableset.ColumnDiff(a.Tables[i], z.Tables[i], "shard1", "shard2"); d != "" {
			t.Errorf("%s differs after schema sync: %s", a.Tables[i], d)
		}
		if ok, err := tableset.HasTokenIndex(ctx, dst.Pool, z.Tables[i]); err != nil || !ok {
			t.Errorf("no token index on %s: %v", z.Tables[i], err)
		}
	}
	// The defaults, the sequence, the constraints and the indexes came along;
	// reshard's fence trigger did not.
	dst.Exec(t, `INSERT INTO users (email) VALUES ('a@x')`)
	if n := dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id = 1 AND name = 'anon'`); n != 1 {
		t.Error("the default and the sequence of users.id did not come along")
	}
	for q, want := range map[string]int64{
		`SELECT count(*) FROM pg_indexes WHERE tablename = 'users' AND indexname = 'users_name'`:                              1,
		`SELECT count(*) FROM pg_constraint WHERE conrelid = 'orders'::regclass AND contype IN ('f', 'c', 'p')`:               3,
		`SELECT count(*) FROM pg_constraint WHERE conrelid = 'users'::regclass AND contype = 'u'`:                             1,
		`SELECT count(*) FROM pg_trigger WHERE tgrelid IN ('users'::regclass, 'orders'::regclass) AND tgname LIKE 'reshard%'`: 0,
	} {
		if n := dst.QueryInt64(t, q); n != want {
			t.Errorf("%s: %d, want %d", q, n, want)
		}
	}
	// In sync: nothing to do. A conflicting definition: refused, unchanged.
	if out, code := cli("schema", "sync", "shard2"); code != 0 || !strings.Contains(out, "public.users on shard2 matches shard1") {
		t.Fatalf("second schema sync: exit %d\n%s", code, out)
	}
	dst.Exec(t, `ALTER TABLE orders ALTER COLUMN amount TYPE int`)
	out, code = cli("schema", "sync", "shard2")
	if code != 2 || !strings.Contains(out, "public.orders") || !strings.Contains(out, "amount") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("schema sync over a conflicting table: exit %d\n%s", code, out)
	}
}

// schema sync as a role without superuser (deploy/reshard-role.sql): the
// tables are created on the new shard as the role owning them on the
// source, so the application writes there as everywhere; a role that cannot
// act as that owner on the target is told the fix, nothing created.
func TestSchemaSyncAsLeastPrivilegedRole(t *testing.T) {
	control, src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	reshard, app := pgtest.RoleName("reshard"), pgtest.RoleName("app")
	pgtest.CreateRole(t, app, control, src, dst)
	pgtest.CreateRole(t, reshard, control, src, dst)
	ra, rr := pgx.Identifier{app}.Sanitize(), pgx.Identifier{reshard}.Sanitize()
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `GRANT CREATE ON SCHEMA public TO `+ra)
		db.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "owners": app})
	}
	control.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "control": "1"})
	src.As(t, app).Exec(t, `CREATE TABLE users (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE);
CREATE TABLE orders (user_id bigint NOT NULL REFERENCES users (id), id bigint NOT NULL, PRIMARY KEY (user_id, id))`)
	wc := devenv.WorkerConfig{Control: control.As(t, reshard).DSN, Shards: map[string]string{"shard1": src.As(t, reshard).DSN, "shard2": dst.As(t, reshard).DSN},
		Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "reshard.yaml")
	if err := os.WriteFile(config, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "init", "--config", config, "--shards", "shard1", "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("init as %s: exit %d\n%s", reshard, code, out)
	}
	dst.Exec(t, `REVOKE `+ra+` FROM `+rr)
	out, code := run(t, "schema", "sync", "shard2", "--config", config)
	if code != 1 || !strings.Contains(out, "GRANT "+ra+" TO "+rr) || !strings.Contains(out, "nothing was created") {
		t.Fatalf("schema sync by a role that is not a member of the owner on the target: exit %d\n%s", code, out)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`); n != 0 {
		t.Fatalf("a refused schema sync created %d tables", n)
	}
	dst.Exec(t, `GRANT `+ra+` TO `+rr)
	if out, code := run(t, "schema", "sync", "shard2", "--config", config); code != 0 || !strings.Contains(out, "created public.users on shard2") {
		t.Fatalf("schema sync as %s: exit %d\n%s", reshard, code, out)
	}
	for _, tb := range []string{"users", "orders"} {
		if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = $1 AND tableowner = $2`, tb, app); n != 1 {
			t.Errorf("%s on shard2 is not owned by %s, its owner on shard1", tb, app)
		}
	}
	dst.As(t, app).Exec(t, `INSERT INTO users (email) VALUES ('a@x'); INSERT INTO orders VALUES (1, 1)`)
}
