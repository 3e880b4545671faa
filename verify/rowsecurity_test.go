package verify

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestRowSecurityFailsVerify: a table with FORCE ROW LEVEL SECURITY whose
// policy shows the verifying role (a member of the owner, no BYPASSRLS) no
// row, the source holding 100 and the target none. Through pools made
// without reshard's settings (verify pins its own sessions), verify fails
// with 42501 instead of comparing 0 rows on each side. On 6e755b7 it
// passed: 0 rows compared, 0 mismatches.
func TestRowSecurityFailsVerify(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	owner, role := pgtest.RoleName("verify_owner"), pgtest.RoleName("verify_rls")
	var as [2]*pgtest.DB
	for i, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, usersSrc)
		pgtest.CreateRole(t, owner, db)
		pgtest.CreateRole(t, role, db)
		db.Exec(t, `ALTER TABLE users OWNER TO `+pgx.Identifier{owner}.Sanitize()+`;
			ALTER TABLE users ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
			CREATE POLICY tenant ON users USING (current_setting('app.tenant', true) = 'all');
			GRANT `+pgx.Identifier{owner}.Sanitize()+` TO `+pgx.Identifier{role}.Sanitize())
		as[i] = db.As(t, role)
	}
	src.Exec(t, usersFill, 1, 100)
	_, err := Run(ctx, as[0].Pool, as[1].Pool, Options{Set: introspect(t, src, usersSpec), Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42501" {
		t.Fatalf("verify of 100 source rows a policy hides: %v; want 42501 (query would be affected by row-level security policy)", err)
	}
}
