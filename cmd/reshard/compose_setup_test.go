package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// docker-compose.yml's setup (deploy/compose-setup.sh), run against real
// servers: the example tables end up owned by an application role, and the
// role it makes for reshard is no superuser, yet `reshard init` succeeds as
// it (registers the tables, fences the shards). On main the compose worker
// ran as the postgres superuser.
func TestComposeSetupMakesALeastPrivilegedRole(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	if _, err := exec.LookPath("psql"); err != nil {
		if _, err := os.Stat("/usr/lib/postgresql/15/bin/psql"); err != nil {
			t.Skip("no psql")
		}
		t.Setenv("PATH", os.Getenv("PATH")+":/usr/lib/postgresql/15/bin")
	}
	control, s1, s2 := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	suffix := strings.ToLower(strings.ReplaceAll(control.Name, "-", "_"))
	role, app := "rs_"+suffix, "app_"+suffix
	// Twice: it is idempotent.
	for i := 1; i <= 2; i++ {
		cmd := exec.Command("sh", "../../deploy/compose-setup.sh", control.DSN, s1.DSN, s2.DSN)
		cmd.Env = append(os.Environ(), "RESHARD_DB_PASSWORD=not-checked-here", "RESHARD_ROLE="+role, "APP_ROLE="+app)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("compose-setup.sh (run %d): %v\n%s", i, err, out)
		}
	}
	ctx := context.Background()
	var super bool
	if err := s1.Pool.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, role).Scan(&super); err != nil || super {
		t.Fatalf("role %s: superuser %v, %v", role, super, err)
	}
	var owner string
	if err := s2.Pool.QueryRow(ctx, `SELECT tableowner FROM pg_tables WHERE tablename = 'orders' AND schemaname = 'public'`).Scan(&owner); err != nil || owner != app {
		t.Fatalf("orders owned by %q (%v), want %s", owner, err, app)
	}
	as := func(db *pgtest.DB) string {
		return fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s sslmode=disable", db.Server.Port, db.Name, role)
	}
	wc := devenv.WorkerConfig{Control: as(control), Shards: map[string]string{"shard1": as(s1), "shard2": as(s2)},
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
		t.Fatalf("init as %s: exit %d\n%s", role, code, out)
	}
	var n int
	if err := s1.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relname = 'users' AND t.tgname LIKE 'reshard%'`).Scan(&n); err != nil || n == 0 {
		t.Fatalf("init as %s left no fence trigger on users (%d, %v)", role, n, err)
	}
}
