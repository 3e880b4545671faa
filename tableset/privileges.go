package tableset

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Privilege checks of the PLAN phase. reshard needs no superuser on a shard
// (docs/operations.md, "Privileges"; deploy/sql/reshard-role.sql grants all
// of them). Each missing privilege is one Problem whose Fix is the statement
// that grants it.
const (
	// CheckReplication: the REPLICATION attribute, for the slots (the
	// move's, the reverse stream's, verify's temporary ones with their
	// exported snapshots).
	CheckReplication = "replication_privilege"
	// CheckCreate: CREATE on the database, for the reshard schema (fences,
	// checkpoints, journal) and for publications.
	CheckCreate = "create_privilege"
	// CheckReplicaRole: SET on session_replication_role (PostgreSQL 15:
	// GRANT SET ON PARAMETER), with which the appliers pass the fences.
	CheckReplicaRole = "session_replication_role"
	// CheckOrigins: EXECUTE on one of the replication-origin functions
	// (superuser only unless granted), with which the appliers record what
	// they applied.
	CheckOrigins = "replication_origin_function"
	// CheckStats: the privileges of pg_read_all_stats, to see every
	// session in pg_stat_activity: which backends the cutover's in-flight
	// wait may ignore (walsenders, autovacuum: their type is hidden
	// otherwise) and how many are busy (the copy's backoff).
	CheckStats = "read_all_stats"
	// CheckOwner: the privileges of the owner of a table of the set: only
	// its owner may publish it and drop its triggers.
	CheckOwner = "table_owner"
	// CheckReshardSchema: the objects reshard keeps in the schema reshard
	// of a shard must be the role's own, to replace the fence functions and
	// write the fence registry (a schema made by a superuser before).
	CheckReshardSchema = "reshard_schema_owner"
	// CheckRowSecurity: a table with row-level security that the role does
	// not bypass (no BYPASSRLS, and FORCE ROW LEVEL SECURITY or not the
	// owner's privileges). reshard's sessions run with row_security off
	// (internal/pgsession), so the copy, the catch-up, verify and cleanup
	// would fail on it; with a policy filtering them they would move,
	// compare and delete only the rows it shows.
	CheckRowSecurity = "row_security"
)

// OriginFunctions are the replication-origin functions the appliers call
// (cdc), by signature.
var OriginFunctions = []string{
	"pg_replication_origin_create(text)",
	"pg_replication_origin_drop(text)",
	"pg_replication_origin_session_setup(text)",
	"pg_replication_origin_session_progress(boolean)",
	"pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone)",
}

// checkRowSecurity records a Problem when table t has row-level security
// that the role q connects as does not bypass. A superuser or a BYPASSRLS
// role bypasses every policy; the owner's privileges bypass them unless the
// table FORCEs row level security.
func (rep *Report) checkRowSecurity(ctx context.Context, q Querier, name string, t Table) error {
	var (
		role            string
		enabled, forced bool
		owner, bypass   bool
		policies        int
	)
	err := q.QueryRow(ctx, `
		SELECT current_user, c.relrowsecurity, c.relforcerowsecurity, pg_has_role(c.relowner, 'USAGE'),
		       r.rolsuper OR r.rolbypassrls, (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)::int
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, pg_roles r
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') AND r.rolname = current_user`,
		t.Schema, t.Name).Scan(&role, &enabled, &forced, &owner, &bypass, &policies)
	if err != nil {
		return fmt.Errorf("preflight: read the row security of %s on %s: %w", t, name, err)
	}
	if !enabled || bypass || (owner && !forced) {
		return nil
	}
	how := "ENABLE ROW LEVEL SECURITY"
	if forced {
		how = "ENABLE and FORCE ROW LEVEL SECURITY"
	}
	rep.add(&Problem{Check: CheckRowSecurity, Shard: name, Table: t.String(),
		Problem: fmt.Sprintf("table %s on %s has %s (policies: %d) and role %s does not bypass it: a policy would hide rows from the copy, the catch-up, verify and cleanup (reshard refuses to run on fewer rows than the table holds)", t, name, how, policies, role),
		Fix:     "ALTER ROLE " + pgx.Identifier{role}.Sanitize() + " BYPASSRLS (as a superuser; deploy/reshard-role.sql grants it)"})
	return nil
}

// checkPrivileges records a Problem for every privilege the role q connects
// as lacks on server name. A superuser has them all.
func (rep *Report) checkPrivileges(ctx context.Context, q Querier, name string) error {
	var (
		role, db                             string
		super, repl, create, stats, statsMem bool
		version                              int
	)
	err := q.QueryRow(ctx, `
		SELECT current_user, current_database(), r.rolsuper, r.rolreplication,
		       has_database_privilege(current_database(), 'CREATE'),
		       pg_has_role('pg_read_all_stats', 'USAGE'), pg_has_role('pg_read_all_stats', 'MEMBER'),
		       current_setting('server_version_num')::int
		FROM pg_roles r WHERE r.rolname = current_user`).Scan(&role, &db, &super, &repl, &create, &stats, &statsMem, &version)
	if err != nil {
		return fmt.Errorf("preflight: read the privileges of the role on %s: %w", name, err)
	}
	if super {
		return nil
	}
	r := pgx.Identifier{role}.Sanitize()
	if !repl {
		rep.add(&Problem{Check: CheckReplication, Shard: name,
			Problem: fmt.Sprintf("role %s on %s has no REPLICATION attribute: it cannot create or stream the move's replication slots", role, name),
			Fix:     "ALTER ROLE " + r + " REPLICATION"})
	}
	if !create {
		rep.add(&Problem{Check: CheckCreate, Shard: name,
			Problem: fmt.Sprintf("role %s has no CREATE privilege on database %s on %s: it cannot create the schema reshard (fences, checkpoints) nor the move's publications", role, db, name),
			Fix:     "GRANT CREATE ON DATABASE " + pgx.Identifier{db}.Sanitize() + " TO " + r})
	}
	if version < 150000 {
		rep.add(&Problem{Check: CheckReplicaRole, Shard: name,
			Problem: fmt.Sprintf("%s runs PostgreSQL %d.%d, where only a superuser may set session_replication_role, which the appliers set to pass the fences", name, version/10000, version%10000),
			Fix:     "ALTER ROLE " + r + " SUPERUSER, or upgrade to PostgreSQL 15 and GRANT SET ON PARAMETER session_replication_role TO " + r})
	} else {
		var set bool
		if err := q.QueryRow(ctx, `SELECT has_parameter_privilege('session_replication_role', 'SET')`).Scan(&set); err != nil {
			return fmt.Errorf("preflight: read the parameter privileges of the role on %s: %w", name, err)
		}
		if !set {
			rep.add(&Problem{Check: CheckReplicaRole, Shard: name,
				Problem: fmt.Sprintf("role %s on %s may not set session_replication_role, which the appliers (copy, CDC, cleanup) set to replica to pass the fences", role, name),
				Fix:     "GRANT SET ON PARAMETER session_replication_role TO " + r})
		}
	}
	rows, err := q.Query(ctx, `SELECT f FROM unnest($1::text[]) f WHERE NOT has_function_privilege(f, 'EXECUTE')`, OriginFunctions)
	var missing []string
	if err == nil {
		missing, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("preflight: read the function privileges of the role on %s: %w", name, err)
	}
	for _, f := range missing {
		rep.add(&Problem{Check: CheckOrigins, Shard: name,
			Problem: fmt.Sprintf("role %s on %s may not execute %s, with which the appliers record what they applied (replication origins)", role, name, f),
			Fix:     "GRANT EXECUTE ON FUNCTION " + f + " TO " + r})
	}
	if !stats {
		fix := "GRANT pg_read_all_stats TO " + r
		if statsMem {
			fix = "ALTER ROLE " + r + " INHERIT" // a member that does not inherit
		}
		rep.add(&Problem{Check: CheckStats, Shard: name,
			Problem: fmt.Sprintf("role %s on %s cannot see the sessions of other roles in pg_stat_activity (pg_read_all_stats): the cutover would wait for walsenders and autovacuum it cannot tell from writers, and the copy's backoff would not count busy sessions", role, name),
			Fix:     fix})
	}
	return rep.checkReshardSchema(ctx, q, name, role)
}

// checkReshardSchema names the objects of the schema reshard on a shard that
// the role cannot act as the owner of (made by another role, say a superuser
// that ran reshard before), with the statements that hand them over.
func (rep *Report) checkReshardSchema(ctx context.Context, q Querier, name, role string) error {
	rows, err := q.Query(ctx, `
		SELECT stmt FROM (
			SELECT 0 AS o, 'ALTER SCHEMA ' || quote_ident(n.nspname) AS stmt, n.nspowner AS owner
			FROM pg_namespace n WHERE n.nspname = 'reshard'
			UNION ALL
			SELECT 1, 'ALTER ' || CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' ELSE 'TABLE' END || ' ' || c.oid::regclass::text, c.relowner
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'reshard' AND c.relkind IN ('r', 'p', 'v', 'S')
			  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i'))
			UNION ALL
			SELECT 2, 'ALTER FUNCTION ' || p.oid::regprocedure::text, p.proowner
			FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = 'reshard'
			  -- the fence accelerator's function belongs to its extension
			  -- (made by whoever created it); reshard never replaces it
			  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
		) x
		WHERE NOT pg_has_role(owner, 'USAGE')
		ORDER BY o, stmt`)
	var stmts []string
	if err == nil {
		stmts, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("preflight: read the owners of the schema reshard on %s: %w", name, err)
	}
	if len(stmts) == 0 {
		return nil
	}
	r := pgx.Identifier{role}.Sanitize()
	for i := range stmts {
		stmts[i] += " OWNER TO " + r
	}
	rep.add(&Problem{Check: CheckReshardSchema, Shard: name,
		Problem: fmt.Sprintf("%d object(s) of the schema reshard on %s belong to a role that %s does not act as (made by another role before, say a superuser): it could not replace the fence functions nor write the fence registry; hand them over as their owner or a superuser", len(stmts), name, role),
		Fix:     strings.Join(stmts, "; ")})
	return nil
}

// checkOwner records a Problem when the role cannot act as the owner of t:
// publishing a table and dropping its triggers are its owner's, and a
// member of the owner role (with INHERIT) has all of the table's privileges.
func (rep *Report) checkOwner(ctx context.Context, q Querier, name string, t Table) error {
	var (
		role, owner       string
		usage, member, ok bool
	)
	err := q.QueryRow(ctx, `
		SELECT current_user, pg_get_userbyid(c.relowner), pg_has_role(c.relowner, 'USAGE'), pg_has_role(c.relowner, 'MEMBER'),
		       has_schema_privilege(n.oid, 'USAGE')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Name).Scan(&role, &owner, &usage, &member, &ok)
	if err != nil {
		return fmt.Errorf("preflight: read the owner of %s on %s: %w", t, name, err)
	}
	r := pgx.Identifier{role}.Sanitize()
	switch {
	case !member:
		rep.add(&Problem{Check: CheckOwner, Shard: name, Table: t.String(),
			Problem: fmt.Sprintf("role %s on %s is not a member of %s, the owner of %s: only the owner may publish the table and drop its triggers", role, name, owner, t),
			Fix:     "GRANT " + pgx.Identifier{owner}.Sanitize() + " TO " + r})
	case !usage:
		rep.add(&Problem{Check: CheckOwner, Shard: name, Table: t.String(),
			Problem: fmt.Sprintf("role %s on %s is a member of %s, the owner of %s, but does not inherit its privileges (NOINHERIT)", role, name, owner, t),
			Fix:     "ALTER ROLE " + r + " INHERIT"})
	case !ok:
		rep.add(&Problem{Check: CheckOwner, Shard: name, Table: t.String(),
			Problem: fmt.Sprintf("role %s on %s has no USAGE on the schema of %s", role, name, t),
			Fix:     "GRANT USAGE ON SCHEMA " + pgx.Identifier{t.Schema}.Sanitize() + " TO " + r})
	}
	return nil
}
