package cutover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/verify"
)

// tenantRows is a multi-tenant table with ENABLE and FORCE ROW LEVEL
// SECURITY and a policy on a session setting (as an application sets its
// tenant): a session that sets no tenant sees none of its rows, the owner's
// members included.
func tenantRows(t testing.TB, e *movetest.Env) {
	movetest.Table(`CREATE TABLE tenant_rows (k bigint PRIMARY KEY, tenant text NOT NULL, v text);
		ALTER TABLE tenant_rows ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
		CREATE POLICY tenant ON tenant_rows USING (tenant = current_setting('app.tenant', true))`, "tenant_rows", "k")(t, e)
}

// seedTenants writes a row of tenant_rows for every key on its owner, as the
// superuser (a bypasses the policy), and returns how many are moving.
func seedTenants(t *testing.T, e *movetest.Env) int64 {
	t.Helper()
	for _, k := range e.Keys {
		owner := e.Old.Owner(ring.TokenInt64(k))
		e.Super[owner].Exec(t, "INSERT INTO tenant_rows VALUES ($1, $2, 'seed')", k, fmt.Sprintf("t%d", k%3))
	}
	return superCount(t, e, "a")
}

// superCount counts tenant_rows in the moving ranges on shard, as the
// superuser: every row, whatever the policy.
func superCount(t *testing.T, e *movetest.Env, shard string) int64 {
	t.Helper()
	var tb tableset.Table
	for _, x := range e.Set.Tables {
		if x.Name == "tenant_rows" {
			tb = x
		}
	}
	return e.Super[shard].QueryInt64(t, "SELECT count(*) FROM tenant_rows WHERE "+ring.Predicate(tb.TokenSQL(""), e.Move.Ranges))
}

var tenantSpec = tableset.Spec{Name: "app", Tables: []tableset.TableSpec{{Table: "kv", KeyColumn: "k"}, {Table: "items", KeyColumn: "k"}, {Table: "tenant_rows", KeyColumn: "k"}}}

// TestForcedRowSecurityMovesEveryRow: reshard connecting as the role of
// deploy/reshard-role.sql (a member of the tables' owner) moves a FORCE
// ROW LEVEL SECURITY table whose policy shows it nothing: preflight passes,
// the copy and the catch-up (under the application's writes, tenant set)
// move every row — counted as the superuser on both sides — and verify
// compares them all. On 6e755b7 the copy copied 0 rows and verify passed
// comparing 0.
func TestForcedRowSecurityMovesEveryRow(t *testing.T) {
	e := movetest.New(t, "rls", 400, tenantRows, movetest.LeastPrivileged())
	moving := seedTenants(t, e)
	if moving == 0 {
		t.Fatal("no tenant rows in the moving ranges: the test proves nothing")
	}
	ctx := movetest.Ctx(t)
	if _, err := tableset.Preflight(ctx, e.Move.Source, e.Move.Target, tenantSpec, tableset.PreflightOptions{Ranges: e.Move.Ranges}); err != nil {
		t.Fatalf("preflight: %v", err)
	}
	e.Begin(t)
	e.Copy(t)
	if got := superCount(t, e, "b"); got != moving {
		t.Fatalf("the copy moved %d of %d tenant rows", got, moving)
	}
	e.StartForward(t)
	// The application writes its tenant's rows (the policy lets it).
	app := e.Pools["a"]
	for _, k := range e.MovingKeys[:10] {
		conn, err := app.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SELECT set_config('app.tenant', $1, false)", fmt.Sprintf("t%d", k%3)); err != nil {
			t.Fatal(err)
		}
		tag, err := conn.Exec(ctx, "UPDATE tenant_rows SET v = 'app' WHERE k = $1", k)
		conn.Release()
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("application update of key %d: %v, %d rows", k, err, tag.RowsAffected())
		}
	}
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	if got, want := superCount(t, e, "b"), superCount(t, e, "a"); got != want {
		t.Fatalf("after the catch-up b has %d tenant rows, a %d", got, want)
	}
	if n := e.Super["b"].QueryInt64(t, "SELECT count(*) FROM tenant_rows WHERE v = 'app'"); n != 10 {
		t.Fatalf("%d of the application's 10 updates reached b", n)
	}
	rep, err := verify.Run(ctx, e.Move.Source, e.Move.Target, verify.Options{Set: e.SrcSet, Ranges: e.Move.Ranges})
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	for _, tr := range rep.Tables {
		if tr.Table == "public.tenant_rows" {
			for _, r := range tr.Ranges {
				rows += r.Rows
			}
		}
	}
	if !rep.OK() || rows != moving {
		t.Fatalf("verify: ok %v, %d tenant rows compared, want %d", rep.OK(), rows, moving)
	}
	e.StopForward(t)
}

// TestForcedRowSecurityRefusedWithoutBypass: the same table, the role
// without BYPASSRLS. Preflight refuses, naming the table and the grant; and
// were the move run anyway, nothing reads fewer rows than there are: the
// copy fails on the first chunk (row_security off: 42501) with nothing
// moved, verify fails instead of passing on 0 rows, and a cleanup fails
// instead of deleting only the rows the policy shows. On 6e755b7 preflight
// passed, the copy copied 0 rows and verify passed.
func TestForcedRowSecurityRefusedWithoutBypass(t *testing.T) {
	e := movetest.New(t, "rls_refused", 400, tenantRows, movetest.LeastPrivileged())
	moving := seedTenants(t, e)
	var role string
	if err := e.DBs["a"].Pool.QueryRow(context.Background(), "SELECT current_user").Scan(&role); err != nil {
		t.Fatal(err)
	}
	e.Super["a"].Exec(t, `ALTER ROLE "`+role+`" NOBYPASSRLS`)
	ctx := movetest.Ctx(t)
	rep, err := tableset.Preflight(ctx, e.Move.Source, e.Move.Target, tenantSpec, tableset.PreflightOptions{Ranges: e.Move.Ranges})
	var refused bool
	for _, p := range rep.Problems {
		refused = refused || p.Check == tableset.CheckRowSecurity && p.Table == "public.tenant_rows" && strings.Contains(p.Fix, "BYPASSRLS")
	}
	if err == nil || !refused {
		t.Fatalf("preflight: %v, problems %v; want tenant_rows refused with ALTER ROLE ... BYPASSRLS", err, rep.Problems)
	}
	t.Logf("preflight: %v", err)

	e.Begin(t)
	_, err = backfill.Copy(ctx, e.Move.Source, e.Move.Target, backfill.Options{Move: e.Move.ID, Set: e.Set, Ranges: e.Move.Ranges, ChunkRows: 500})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != pgerr.CodeInsufficientPrivilege {
		t.Fatalf("copy under a policy that hides every row: %v, want 42501 (query would be affected by row-level security policy)", err)
	}
	if got := superCount(t, e, "b"); got != 0 {
		t.Fatalf("the refused copy moved %d tenant rows", got)
	}
	if _, err := verify.Run(ctx, e.Move.Source, e.Move.Target, verify.Options{Set: e.SrcSet, Ranges: e.Move.Ranges}); !errors.As(err, &pe) || pe.Code != pgerr.CodeInsufficientPrivilege {
		t.Fatalf("verify with %d rows hidden: %v, want 42501", moving, err)
	}
	// A cleanup of the source (CLEANUP deletes the moved rows there) under
	// the policy would delete only the rows it sees: it fails, deleting none.
	if _, err := backfill.DeleteRanges(ctx, e.Move.Source, e.SrcSet, e.Move.Ranges, 100, nil); !errors.As(err, &pe) || pe.Code != pgerr.CodeInsufficientPrivilege {
		t.Fatalf("cleanup with %d rows hidden: %v, want 42501", moving, err)
	}
	if got := superCount(t, e, "a"); got != moving {
		t.Fatalf("the refused cleanup left %d of %d tenant rows", got, moving)
	}
}
