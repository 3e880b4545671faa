package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// The commands that read and write the shards without a worker, run as a
// role without superuser granted only what deploy/reshard-role.sql grants
// (docs/operations.md, "Privileges"), the application's tables owned by
// another role: init, load, check placement, topology check, and
// topology check --repair of a fence trigger dropped by hand.
func TestLoadAndRepairAsLeastPrivilegedRole(t *testing.T) {
	control, s1, s2 := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	reshard, app := pgtest.RoleName("reshard"), pgtest.RoleName("app")
	pgtest.CreateRole(t, app, control, s1, s2)
	pgtest.CreateRole(t, reshard, control, s1, s2)
	for _, db := range []*pgtest.DB{s1, s2} {
		db.Exec(t, `GRANT CREATE ON SCHEMA public TO `+pgx.Identifier{app}.Sanitize())
		db.As(t, app).Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, balance int NOT NULL DEFAULT 0)`)
		db.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "owners": app})
	}
	control.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "control": "1"})
	wc := devenv.WorkerConfig{Control: control.As(t, reshard).DSN, Shards: map[string]string{"shard1": s1.As(t, reshard).DSN, "shard2": s2.As(t, reshard).DSN},
		Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "reshard.yaml")
	if err := os.WriteFile(config, b, 0o600); err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) (string, int) { return run(t, append(args, "--config", config)...) }
	if out, code := as("init", "--shards", "shard1,shard2", "--table", "users:id"); code != 0 {
		t.Fatalf("init as %s: exit %d\n%s", reshard, code, out)
	}

	var csv strings.Builder
	csv.WriteString("id,email,balance\n")
	const rows = 500
	for id := 1; id <= rows; id++ {
		fmt.Fprintf(&csv, "%d,user%d@example.com,%d\n", id, id, id%7)
	}
	file := filepath.Join(dir, "users.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := as("load", "--table", "users", "--file", file, "--batch-rows", "100"); code != 0 {
		t.Fatalf("load as %s: exit %d\n%s", reshard, code, out)
	}
	n1, n2 := s1.QueryInt64(t, `SELECT count(*) FROM users`), s2.QueryInt64(t, `SELECT count(*) FROM users`)
	if n1+n2 != rows || n1 == 0 || n2 == 0 {
		t.Fatalf("load as %s: shard1 holds %d rows, shard2 %d; want %d on the two", reshard, n1, n2, rows)
	}
	if out, code := as("check", "placement"); code != 0 {
		t.Fatalf("check placement as %s after the load: exit %d\n%s", reshard, code, out)
	}

	// Drift made by hand (by the tables' owner), found and repaired.
	if out, code := as("topology", "check"); code != 0 || strings.Contains(out, "drift") {
		t.Fatalf("topology check as %s of a clean cluster: exit %d\n%s", reshard, code, out)
	}
	s2.As(t, app).Exec(t, `DROP TRIGGER reshard_fence ON users`)
	out, code := as("topology", "check")
	if code != 1 || !strings.Contains(out, "shard2") || !strings.Contains(out, "no fence trigger") {
		t.Fatalf("topology check as %s with a dropped fence: exit %d\n%s", reshard, code, out)
	}
	if out, code := as("topology", "check", "--repair"); code != 0 || !strings.Contains(out, "repaired") {
		t.Fatalf("topology check --repair as %s: exit %d\n%s", reshard, code, out)
	}
	if out, code := as("topology", "check"); code != 0 || strings.Contains(out, "drift") {
		t.Fatalf("topology check as %s after the repair: exit %d\n%s", reshard, code, out)
	}
	if n := s2.QueryInt64(t, `SELECT count(*) FROM pg_trigger WHERE tgname = 'reshard_fence' AND tgrelid = 'users'::regclass`); n != 1 {
		t.Fatalf("shard2 has %d fence triggers on users after the repair", n)
	}
}
