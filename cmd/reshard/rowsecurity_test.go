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

// TestCheckPlacementUnderRowSecurity: shards whose users table has ENABLE
// and FORCE ROW LEVEL SECURITY and a policy that shows reshard's role (the
// role of deploy/reshard-role.sql without BYPASSRLS) none of its rows.
// init (which counts the rows outside each shard's ranges) and check
// placement, run as that role, fail naming the policy and the grant; as the
// superuser init registers the table and check placement finds the rows put
// on a shard that does not own them (each key on both). With 6e755b7's
// unpinned pools the role's init passed, seeing no row.
func TestCheckPlacementUnderRowSecurity(t *testing.T) {
	control, a, b := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	owner, role := pgtest.RoleName("app"), pgtest.RoleName("reshard")
	pgtest.CreateRole(t, owner, a, b)
	pgtest.CreateRole(t, role, a, b)
	for _, db := range []*pgtest.DB{a, b} {
		db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, tenant text NOT NULL);
			ALTER TABLE users ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
			CREATE POLICY tenant ON users USING (tenant = current_setting('app.tenant', true));
			ALTER TABLE users OWNER TO "`+owner+`"`)
		db.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": role, "owners": owner})
		db.Exec(t, `ALTER ROLE "`+role+`" NOBYPASSRLS`)
	}
	configs := map[bool]string{}
	for _, asRole := range []bool{false, true} {
		wc := devenv.WorkerConfig{Control: control.DSN, Shards: map[string]string{},
			Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
		for name, db := range map[string]*pgtest.DB{"shard1": a, "shard2": b} {
			wc.Shards[name] = db.DSN
			if asRole {
				wc.Shards[name] = db.As(t, role).DSN
			}
		}
		y, err := yaml.Marshal(wc)
		if err != nil {
			t.Fatal(err)
		}
		configs[asRole] = filepath.Join(t.TempDir(), "reshard.yaml")
		if err := os.WriteFile(configs[asRole], y, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, code := run(t, "init", "--config", configs[true], "--shards", "shard1,shard2", "--table", "users:id")
	if code == 0 || !strings.Contains(out, "row-level security") || !strings.Contains(out, "BYPASSRLS") {
		t.Fatalf("init as the role, of rows a policy hides: exit %d\n%s", code, out)
	}
	t.Logf("init as the role: exit %d\n%s", code, out)
	if out, code := run(t, "init", "--config", configs[false], "--shards", "shard1,shard2", "--table", "users:id"); code != 0 {
		t.Fatalf("init as the superuser: exit %d\n%s", code, out)
	}
	for _, db := range []*pgtest.DB{a, b} { // keys 1..300 on both: each shard holds the other's too
		// The schema reshard the superuser's init made goes to the role.
		db.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": role, "owners": owner})
		db.Exec(t, `ALTER ROLE "`+role+`" NOBYPASSRLS`)
		db.Exec(t, `BEGIN; SET LOCAL session_replication_role = replica;
			INSERT INTO users SELECT g, 't' || g % 3 FROM generate_series(1, 300) g; COMMIT`)
	}
	out, code = run(t, "check", "placement", "--config", configs[true])
	if code == 0 || strings.Contains(out, "every row on its owner") || !strings.Contains(out, "row-level security") || !strings.Contains(out, "BYPASSRLS") {
		t.Fatalf("check placement as the role, of rows a policy hides: exit %d\n%s", code, out)
	}
	t.Logf("check placement as the role: exit %d\n%s", code, out)
	if out, code := run(t, "check", "placement", "--config", configs[false]); code != 1 || !strings.Contains(out, "misplaced") {
		t.Fatalf("check placement as the superuser: exit %d, want 1 and the misplaced rows\n%s", code, out)
	}
}
