package topology

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestMigrateAsNonSuperuser: the control schema needs no superuser, only what
// deploy/reshard-role.sql grants; a role without it is told the fix, also
// when a superuser made the schema before.
func TestMigrateAsNonSuperuser(t *testing.T) {
	ctx := testCtx(t)
	fresh, made := pgtest.NewDB(t, 0), pgtest.NewDB(t, 0)
	role := pgtest.RoleName("ctl_reshard")
	pgtest.CreateRole(t, role, fresh, made)
	if err := Migrate(ctx, made.Pool); err != nil { // by a superuser
		t.Fatal(err)
	}
	for _, db := range []*pgtest.DB{fresh, made} {
		if db == made {
			db.Exec(t, `GRANT CREATE ON DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` TO `+pgx.Identifier{role}.Sanitize())
		}
		as := db.As(t, role)
		err := Migrate(ctx, as.Pool)
		fix := `GRANT CREATE ON DATABASE ` + pgx.Identifier{db.Name}.Sanitize() + ` TO ` + pgx.Identifier{role}.Sanitize()
		if !pgerr.Privilege(err) || !strings.Contains(err.Error(), fix) || !strings.Contains(err.Error(), "deploy/reshard-role.sql") {
			t.Fatalf("%s: migrate as %s without the grants: %v; want a privilege error naming %q and the script", db.Name, role, err, fix)
		}
		db.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": role, "control": "1"})
		if err := Migrate(ctx, as.Pool); err != nil {
			t.Fatalf("%s: migrate as %s with the grants: %v", db.Name, role, err)
		}
		s := NewStore(as.Pool)
		register(t, s, "a")
		mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	}
}
