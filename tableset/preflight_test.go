package tableset

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
)

const preflightDDL = `
	CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, name text);
	CREATE TABLE orders (id bigserial PRIMARY KEY, user_id bigint NOT NULL, total numeric(10,2), n int GENERATED ALWAYS AS (1) STORED)`

var preflightSpec = Spec{Name: "app", Tables: []TableSpec{{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"}}}

// fingerprint summarizes what Preflight must never change: relations,
// indexes, replica identities, publications, slots and roles.
func fingerprint(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	var s string
	err := db.Pool.QueryRow(context.Background(), `
		SELECT md5(string_agg(x, ',' ORDER BY x)) FROM (
			SELECT 'c:' || oid || relname || relkind::text || relreplident::text || relpages FROM pg_class
			UNION ALL SELECT 'i:' || indexrelid || indisvalid || indisreplident FROM pg_index
			UNION ALL SELECT 'p:' || pubname || pubtruncate FROM pg_publication
			UNION ALL SELECT 'pr:' || prpubid || '/' || prrelid FROM pg_publication_rel
			UNION ALL SELECT 's:' || slot_name FROM pg_replication_slots
			UNION ALL SELECT 'r:' || rolname || rolsuper || rolreplication FROM pg_roles
			UNION ALL SELECT 'n:' || relname || (xpath('/row/c/text()', query_to_xml('SELECT count(*) AS c FROM ' || oid::regclass, false, true, '')))[1]::text
				FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r'
		) f(x)`).Scan(&s)
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	return s
}

func preflightPair(t *testing.T) (src, dst *pgtest.DB) {
	src, dst = pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, preflightDDL)
	dst.Exec(t, preflightDDL)
	src.Exec(t, `INSERT INTO users SELECT g, 'u'||g||'@x', 'n' FROM generate_series(1, 200) g;
		INSERT INTO orders (user_id, total) SELECT g % 200 + 1, g FROM generate_series(1, 400) g`)
	return src, dst
}

// runPreflight runs Preflight and fails the test if it changed anything on either side.
func runPreflight(t *testing.T, src, dst *pgtest.DB, sp, dp *pgxpool.Pool, opts PreflightOptions) (Report, error) {
	t.Helper()
	before := fingerprint(t, src) + fingerprint(t, dst)
	if sp == nil {
		sp = src.Pool
	}
	if dp == nil {
		dp = dst.Pool
	}
	rep, err := Preflight(context.Background(), sp, dp, preflightSpec, opts)
	if after := fingerprint(t, src) + fingerprint(t, dst); after != before {
		t.Fatalf("preflight changed the catalog or the data")
	}
	return rep, err
}

func TestPreflightPasses(t *testing.T) {
	src, dst := preflightPair(t)
	half := ring.Range{Lo: ring.MinToken, Hi: 0}
	rep, err := runPreflight(t, src, dst, nil, nil, PreflightOptions{Ranges: []ring.Range{half}})
	if err != nil {
		t.Fatalf("clean pair refused: %v", err)
	}
	if len(rep.Source.Tables) != 2 || len(rep.Target.Tables) != 2 {
		t.Fatalf("tables: %+v", rep)
	}
	var seq, gen, noIndex int
	for _, w := range rep.Warnings {
		switch {
		case strings.Contains(w.Message, "sequence"):
			seq++
		case strings.Contains(w.Message, "generated"):
			gen++
		case strings.Contains(w.Message, "no token index"):
			noIndex++
		}
	}
	if seq != 2 || gen != 2 || noIndex != 4 { // orders on both sides; every table on both sides
		t.Fatalf("warnings %+v", rep.Warnings)
	}
	for _, ix := range rep.Indexes {
		if ix.Present {
			t.Fatalf("index reported present: %+v", ix)
		}
	}
	if want := `CREATE INDEX CONCURRENTLY IF NOT EXISTS "users_reshard_token" ON "public"."users" ((hashint8extended("id", 0)))`; rep.Indexes[0].Statement != want {
		t.Fatalf("statement %s", rep.Indexes[0].Statement)
	}
	// Never analyzed: sampled, here the whole (small) table, so exact.
	exact := src.QueryInt64(t, `SELECT count(*) FROM users WHERE `+ring.Predicate(`hashint8extended(id, 0)`, []ring.Range{half}))
	if e := rep.Estimates[0]; e.Table != "public.users" || e.Rows != exact || !strings.HasPrefix(e.Method, "sample") || e.Bytes <= 0 {
		t.Fatalf("estimate %+v, want %d rows", e, exact)
	}
}

func TestPreflightEstimatesFromStatistics(t *testing.T) {
	src, dst := preflightPair(t)
	src.Exec(t, `INSERT INTO users SELECT g, 'u'||g||'@x', 'n' FROM generate_series(201, 20000) g; ANALYZE users; ANALYZE orders`)
	quarter := ring.Range{Lo: 0, Hi: math.MaxInt64 / 2}
	rep, err := runPreflight(t, src, dst, nil, nil, PreflightOptions{Ranges: []ring.Range{quarter}})
	if err != nil {
		t.Fatal(err)
	}
	e := rep.Estimates[0]
	if math.Abs(float64(e.Rows)-5000) > 500 {
		t.Fatalf("estimate %+v, want about 5000 rows", e)
	}
	if eta := rep.ETA(1000, 0); eta < 4*time.Second || eta > 7*time.Second {
		t.Fatalf("ETA at 1000 rows/s: %s (rows %d)", eta, rep.Rows())
	}
}

// A shard holds only the ranges it owns: the estimate of a range is its share
// of the shard's rows, not its share of the token space.
func TestEstimateOnAShardOwningPartOfTheSpace(t *testing.T) {
	src, _ := preflightPair(t)
	// This "shard" owns only tokens in (0, MaxInt64]: half of the space.
	src.Exec(t, `DELETE FROM orders; DELETE FROM users; INSERT INTO users SELECT g, 'u'||g||'@x', 'n' FROM generate_series(1, 40000) g WHERE hashint8extended(g, 0) > 0; ANALYZE users`)
	quarter := ring.Range{Lo: 0, Hi: math.MaxInt64 / 2}
	set, err := Introspect(context.Background(), src.Pool, Spec{Name: "s", Tables: []TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	est, err := EstimateRanges(context.Background(), src.Pool, set.Tables[0], []ring.Range{quarter})
	if err != nil {
		t.Fatal(err)
	}
	exact := src.QueryInt64(t, `SELECT count(*) FROM users WHERE `+ring.Predicate(`hashint8extended(id, 0)`, []ring.Range{quarter}))
	if math.Abs(float64(est[0].Rows-exact)) > 0.1*float64(exact) {
		t.Fatalf("estimate %+v, want about %d rows (half of the shard's rows)", est[0], exact)
	}
}

func TestPreflightRefuses(t *testing.T) {
	cases := []struct {
		name         string
		src, dst     string // DDL run on each side before the check
		opts         PreflightOptions
		check, shard string
		table        string
		want         string // in the problem or its fix
	}{
		{name: "missing table", dst: `DROP TABLE orders`, check: CheckTable, shard: "target", table: "public.orders", want: "create it there"},
		{name: "no primary key", src: `ALTER TABLE users DROP CONSTRAINT users_pkey`, check: CheckPrimaryKey, shard: "source", table: "public.users", want: "ADD PRIMARY KEY"},
		{name: "key column missing", dst: `ALTER TABLE orders DROP COLUMN user_id`, check: CheckKey, shard: "target", table: "public.orders", want: `no column "user_id"`},
		{name: "type differs", dst: `ALTER TABLE orders ALTER COLUMN total TYPE bigint`, check: CheckColumns, shard: "target", table: "public.orders", want: `column "total" is numeric(10,2) on source but bigint on target`},
		{name: "extra column", dst: `ALTER TABLE users ADD COLUMN age int`, check: CheckColumns, shard: "target", table: "public.users", want: `column "age" exists on target but not on source`},
		{name: "replica identity nothing", src: `ALTER TABLE users REPLICA IDENTITY NOTHING`, check: CheckReplicaIdentity, shard: "source", table: "public.users", want: "REPLICA IDENTITY DEFAULT"},
		{name: "replica identity index gone", dst: `CREATE UNIQUE INDEX users_email ON users (email); ALTER TABLE users REPLICA IDENTITY USING INDEX users_email; DROP INDEX users_email`,
			check: CheckReplicaIdentity, shard: "target", table: "public.users", want: "index is gone"},
		{name: "truncate published", dst: `CREATE PUBLICATION app_pub FOR TABLE users`, check: CheckTruncate, shard: "target", table: "public.users", want: `ALTER PUBLICATION "app_pub" SET (publish = 'insert, update, delete')`},
		{name: "truncate published for all tables", src: `CREATE PUBLICATION everything FOR ALL TABLES`, check: CheckTruncate, shard: "source", table: "public.orders", want: "publishes TRUNCATE"},
		{name: "wal senders", opts: PreflightOptions{WalSenders: 10000}, check: CheckWalSenders, shard: "source", want: "raise max_wal_senders"},
		{name: "key allows NULL", src: `ALTER TABLE orders ALTER COLUMN user_id DROP NOT NULL`, check: CheckKeyNotNull, shard: "source", table: "public.orders", want: `ALTER TABLE "public"."orders" ALTER COLUMN "user_id" SET NOT NULL`},
		{name: "names shards as told", dst: `DROP TABLE users`, opts: PreflightOptions{SourceName: "shard1", TargetName: "shard7"}, check: CheckTable, shard: "shard7", table: "public.users", want: "does not exist on shard7"},
		// Triggers and rules that fire for session_replication_role = replica
		// writes (the copy, the appliers, cleanup) are refused, named, with
		// the statement that makes them fire for the application only.
		{name: "always trigger", src: `CREATE FUNCTION bump() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.name := NEW.name || '+'; RETURN NEW; END$$;
			CREATE TRIGGER "Bump" BEFORE INSERT OR UPDATE ON users FOR EACH ROW EXECUTE FUNCTION bump(); ALTER TABLE users ENABLE ALWAYS TRIGGER "Bump"`,
			check: CheckReplicaTriggers, shard: "source", table: "public.users", want: `trigger "Bump" on source of public.users is ENABLE ALWAYS: it fires for reshard's copy, catch-up and cleanup writes too (session_replication_role = replica does not stop it), running the application's logic a second time for rows it wrote once: ALTER TABLE "public"."users" ENABLE TRIGGER "Bump" (it then fires for the application's writes only)`},
		{name: "replica trigger on the target", dst: `CREATE TABLE audit (id bigint); CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO audit VALUES (NEW.user_id); RETURN NEW; END$$;
			CREATE TRIGGER audit AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION audit(); ALTER TABLE orders ENABLE REPLICA TRIGGER audit`,
			check: CheckReplicaTriggers, shard: "target", table: "public.orders", want: `ENABLE REPLICA: it fires only for replicated writes`},
		{name: "always rule", dst: `CREATE TABLE audit (id bigint); CREATE RULE log_users AS ON INSERT TO users DO ALSO INSERT INTO audit VALUES (NEW.id); ALTER TABLE users ENABLE ALWAYS RULE log_users`,
			check: CheckReplicaTriggers, shard: "target", table: "public.users", want: `ALTER TABLE "public"."users" ENABLE RULE "log_users"`},
		// The README's Quick start met it: a new shard has no tables until
		// schema sync gives it the source's.
		{name: "missing table names schema sync", dst: `DROP TABLE users; DROP TABLE orders`, opts: PreflightOptions{SourceName: "source shard1", TargetName: "target shard7", TargetShard: "shard7"},
			check: CheckTable, shard: "target shard7", table: "public.users", want: "reshard schema sync shard7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src, dst := preflightPair(t)
			if c.src != "" {
				src.Exec(t, c.src)
			}
			if c.dst != "" {
				dst.Exec(t, c.dst)
			}
			rep, err := runPreflight(t, src, dst, nil, nil, c.opts)
			if err == nil {
				t.Fatal("preflight passed")
			}
			expectProblem(t, rep, err, c.check, c.shard, c.table, c.want)
		})
	}
}

func expectProblem(t *testing.T, rep Report, err error, check, shard, table, want string) {
	t.Helper()
	for _, p := range rep.Problems {
		if p.Check == check && p.Shard == shard && p.Table == table && strings.Contains(p.Error(), want) && p.Fix != "" {
			if !strings.Contains(err.Error(), p.Error()) {
				t.Fatalf("returned error %q lacks problem %q", err, p)
			}
			return
		}
	}
	t.Fatalf("no %s problem on %s for %q mentioning %q; got %v", check, shard, table, want, err)
}

func TestPreflightRefusesFullSlots(t *testing.T) {
	src, dst := preflightPair(t)
	ctx := context.Background()
	free := dst.QueryInt64(t, `SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`)
	dst.Exec(t, `SELECT pg_create_physical_replication_slot('preflight_fill_' || g) FROM generate_series(1, $1::int) g`, free)
	t.Cleanup(func() {
		_, _ = dst.Pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'preflight_fill_%'`)
	})
	rep, err := runPreflight(t, src, dst, nil, nil, PreflightOptions{})
	expectProblem(t, rep, err, CheckSlots, "target", "", "pg_drop_replication_slot")
	if len(rep.Problems) != 1 {
		t.Fatalf("problems %v", err)
	}
}

// A server with just the slots the move needs passes, with a warning that
// a catch-up has no slot left for the copies it reads with; one with one
// spare of two, with a warning that it reads with one.
func TestPreflightWarnsNoSpareSlot(t *testing.T) {
	src, dst := preflightPair(t)
	ctx := context.Background()
	t.Cleanup(func() {
		_, _ = dst.Pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'preflight_spare_%'`)
	})
	for _, c := range []struct {
		spare int
		want  string
	}{{1, "1 left for the 2 temporary copies of its slot a CDC catch-up reads with, so a stream far behind catches up with 1 of them"},
		{0, "0 left for the 2 temporary copies of its slot a CDC catch-up reads with, so a stream far behind catches up one read at a time"}} {
		free := dst.QueryInt64(t, `SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`)
		n := free - 1 - int64(c.spare)
		dst.Exec(t, `SELECT pg_create_physical_replication_slot('preflight_spare_' || $2::int || '_' || g) FROM generate_series(1, $1::int) g`, n, c.spare)
		rep, err := runPreflight(t, src, dst, nil, nil, PreflightOptions{CatchUpSlots: 2})
		if err != nil {
			t.Fatalf("%d spare: preflight refused a server with the one slot needed: %v", c.spare, err)
		}
		var warned bool
		for _, w := range rep.Warnings {
			warned = warned || w.Shard == "target" && strings.Contains(w.Message, c.want)
		}
		if !warned {
			t.Fatalf("%d spare: no warning %q; warnings %+v", c.spare, c.want, rep.Warnings)
		}
		var srcWarned bool
		for _, w := range rep.Warnings {
			srcWarned = srcWarned || w.Shard == "source" && strings.Contains(w.Message, "temporary copies")
		}
		if srcWarned {
			t.Fatalf("%d spare: the source, with slots to spare, is warned: %+v", c.spare, rep.Warnings)
		}
	}
}

// TestPreflightPrivileges: a role without superuser passes once
// deploy/reshard-role.sql granted it what reshard needs; without one of
// those privileges it gets exactly the Problem naming it, whose Fix, run by a
// superuser, makes it pass again; a role with none gets all of them.
func TestPreflightPrivileges(t *testing.T) {
	src, dst := preflightPair(t)
	owner, role := pgtest.RoleName("preflight_owner"), pgtest.RoleName("preflight_reshard")
	pgtest.CreateRole(t, owner, src)
	pgtest.CreateRole(t, role, src)
	src.Exec(t, `ALTER TABLE users OWNER TO `+quote(owner)+`; ALTER TABLE orders OWNER TO `+quote(owner))
	as := src.As(t, role).Pool
	r, o, db := quote(role), quote(owner), quote(src.Name)
	type want struct{ check, table, fix string }
	problems := func() []want {
		t.Helper()
		rep, err := runPreflight(t, src, dst, as, nil, PreflightOptions{})
		var got []want
		for _, p := range rep.Problems {
			if p.Shard != "source" {
				t.Fatalf("problem on %s: %v", p.Shard, p)
			}
			got = append(got, want{p.Check, p.Table, p.Fix})
		}
		if (err == nil) != (len(got) == 0) {
			t.Fatalf("error %v with problems %v", err, got)
		}
		return got
	}

	var none []want
	for _, p := range problems() {
		none = append(none, want{check: p.check, table: p.table})
	}
	wantNone := []want{{check: CheckReplication}, {check: CheckCreate}, {check: CheckReplicaRole}}
	for range OriginFunctions {
		wantNone = append(wantNone, want{check: CheckOrigins})
	}
	wantNone = append(wantNone, want{check: CheckStats}, want{CheckOwner, "public.users", ""}, want{CheckOwner, "public.orders", ""})
	if !slices.Equal(none, wantNone) {
		t.Fatalf("a role with no privilege: problems\n%v\nwant\n%v", none, wantNone)
	}

	src.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": role, "owners": owner})
	if got := problems(); len(got) != 0 {
		t.Fatalf("the role granted by deploy/reshard-role.sql is refused: %v", got)
	}
	for _, c := range []struct {
		revoke string
		want   []want
	}{
		{`ALTER ROLE ` + r + ` NOREPLICATION`, []want{{CheckReplication, "", `ALTER ROLE ` + r + ` REPLICATION`}}},
		{`REVOKE CREATE ON DATABASE ` + db + ` FROM ` + r, []want{{CheckCreate, "", `GRANT CREATE ON DATABASE ` + db + ` TO ` + r}}},
		{`REVOKE SET ON PARAMETER session_replication_role FROM ` + r, []want{{CheckReplicaRole, "", `GRANT SET ON PARAMETER session_replication_role TO ` + r}}},
		{`REVOKE EXECUTE ON FUNCTION pg_replication_origin_create(text) FROM ` + r,
			[]want{{CheckOrigins, "", `GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text) TO ` + r}}},
		{`REVOKE EXECUTE ON FUNCTION pg_replication_origin_xact_setup(pg_lsn, timestamptz) FROM ` + r,
			[]want{{CheckOrigins, "", `GRANT EXECUTE ON FUNCTION pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone) TO ` + r}}},
		{`REVOKE pg_read_all_stats FROM ` + r, []want{{CheckStats, "", `GRANT pg_read_all_stats TO ` + r}}},
		{`REVOKE ` + o + ` FROM ` + r, []want{{CheckOwner, "public.users", `GRANT ` + o + ` TO ` + r}, {CheckOwner, "public.orders", `GRANT ` + o + ` TO ` + r}}},
		{`ALTER ROLE ` + r + ` NOINHERIT`, []want{{CheckStats, "", `ALTER ROLE ` + r + ` INHERIT`},
			{CheckOwner, "public.users", `ALTER ROLE ` + r + ` INHERIT`}, {CheckOwner, "public.orders", `ALTER ROLE ` + r + ` INHERIT`}}},
		// reshard run as a superuser before: its schema on the shard.
		{`CREATE SCHEMA reshard; CREATE TABLE reshard.journal (id bigserial PRIMARY KEY); CREATE FUNCTION reshard.guard() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$`,
			[]want{{CheckReshardSchema, "", `ALTER SCHEMA reshard OWNER TO ` + r + `; ALTER TABLE reshard.journal OWNER TO ` + r + `; ALTER FUNCTION reshard.guard() OWNER TO ` + r}}},
	} {
		src.Exec(t, c.revoke)
		got := problems()
		if !slices.Equal(got, c.want) {
			t.Fatalf("after %s: problems\n%v\nwant\n%v", c.revoke, got, c.want)
		}
		for _, p := range got {
			src.Exec(t, p.fix)
		}
		if got := problems(); len(got) != 0 {
			t.Fatalf("after %s and its fixes: %v", c.revoke, got)
		}
	}
}

func quote(s string) string { return `"` + s + `"` }

// TestPreflightRefusesWalLevel needs a server started with wal_level=replica,
// which the shared test servers are not.
func TestPreflightRefusesWalLevel(t *testing.T) {
	src, dst := preflightPair(t)
	pg := pgtest.PG(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := devenv.Server{Name: "walreplica", Port: port, DataDir: filepath.Join(dir, "pg", "data")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pg.Init(ctx, s, devenv.ServerOptions{Fast: true, ExtraConf: []string{"wal_level = replica"}}); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	defer pg.Kill(context.Background(), s)
	pool, err := pgxpool.New(ctx, s.DSN("postgres", false))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, preflightDDL); err != nil {
		t.Fatal(err)
	}
	before := fingerprint(t, src)
	rep, err := Preflight(ctx, src.Pool, pool, preflightSpec, PreflightOptions{})
	if fingerprint(t, src) != before {
		t.Fatal("preflight changed the source")
	}
	expectProblem(t, rep, err, CheckWalLevel, "target", "", "wal_level = logical")
	_ = dst
}

func TestTokenIndex(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	ctx := context.Background()
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (k varchar(20) PRIMARY KEY); CREATE TABLE c ("Key" uuid PRIMARY KEY);
		CREATE TABLE d (id bigint PRIMARY KEY); CREATE INDEX ON d ((hashint8extended(id, 0))) WHERE id > 0;
		CREATE TABLE e (id bigint PRIMARY KEY, o bigint); CREATE INDEX ON e ((hashint8extended(o, 0)))`)
	set, err := Introspect(ctx, db.Pool, Spec{Name: "s", Tables: []TableSpec{{Table: "a", KeyColumn: "id"}}}, "db")
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []TableSpec{{Table: "a", KeyColumn: "id"}, {Table: "b", KeyColumn: "k"}, {Table: "c", KeyColumn: "Key"}, {Table: "d", KeyColumn: "id"}, {Table: "e", KeyColumn: "id"}} {
		tb, err := introspectTable(ctx, db.Pool, ts, "db")
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := HasTokenIndex(ctx, db.Pool, tb); err != nil || ok {
			t.Fatalf("%s: index before creation: %v %v", tb, ok, err)
		}
		if err := CreateTokenIndex(ctx, db.Pool, tb); err != nil {
			t.Fatal(err)
		}
		if ok, err := HasTokenIndex(ctx, db.Pool, tb); err != nil || !ok {
			t.Fatalf("%s: index not found after CreateTokenIndex: %v %v", tb, ok, err)
		}
		if err := CreateTokenIndex(ctx, db.Pool, tb); err != nil { // idempotent
			t.Fatal(err)
		}
	}
	_ = set
}

// TestPreflightRowSecurity: a table with ENABLE and FORCE ROW LEVEL
// SECURITY and a policy on a session setting hides every row from a member
// of its owner. Preflight, run through a pool of reshard's own sessions
// (row_security off), names the table and the grant while the role of
// deploy/reshard-role.sql lacks BYPASSRLS, and passes with it or without
// FORCE (the owner's privileges then bypass the policy).
func TestPreflightRowSecurity(t *testing.T) {
	src, dst := preflightPair(t)
	owner, role := pgtest.RoleName("rls_owner"), pgtest.RoleName("rls_reshard")
	pgtest.CreateRole(t, owner, src)
	pgtest.CreateRole(t, role, src)
	src.Exec(t, `ALTER TABLE users OWNER TO `+quote(owner)+`; ALTER TABLE orders OWNER TO `+quote(owner))
	src.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": role, "owners": owner})
	src.Exec(t, `ALTER TABLE users ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
		CREATE POLICY tenant ON users USING (email LIKE current_setting('app.tenant', true) || '%')`)
	as := src.As(t, role).Pinned(t).Pool
	problems := func() []*Problem {
		t.Helper()
		rep, err := runPreflight(t, src, dst, as, nil, PreflightOptions{Ranges: []ring.Range{{Lo: ring.MinToken, Hi: 0}}})
		if (err == nil) != (len(rep.Problems) == 0) {
			t.Fatalf("error %v with problems %v", err, rep.Problems)
		}
		return rep.Problems
	}
	if got := problems(); len(got) != 0 {
		t.Fatalf("the role of deploy/reshard-role.sql (BYPASSRLS) is refused: %v", got)
	}
	src.Exec(t, `ALTER ROLE `+quote(role)+` NOBYPASSRLS`)
	got := problems()
	if len(got) != 1 || got[0].Check != CheckRowSecurity || got[0].Table != "public.users" || got[0].Shard != "source" ||
		!strings.HasPrefix(got[0].Fix, `ALTER ROLE `+quote(role)+` BYPASSRLS`) || !strings.Contains(got[0].Problem, "FORCE") {
		t.Fatalf("without BYPASSRLS: problems %v, want one %s of public.users naming ALTER ROLE ... BYPASSRLS", got, CheckRowSecurity)
	}
	t.Logf("refused: %v", got[0])
	src.Exec(t, `ALTER TABLE users NO FORCE ROW LEVEL SECURITY`)
	if got := problems(); len(got) != 0 {
		t.Fatalf("ENABLE without FORCE, the owner's member bypasses the policy, yet: %v", got)
	}
	src.Exec(t, `ALTER TABLE users FORCE ROW LEVEL SECURITY; ALTER ROLE `+quote(role)+` BYPASSRLS`)
	if got := problems(); len(got) != 0 {
		t.Fatalf("after the fix: %v", got)
	}
}

// TestPreflightTriggersAndUniques: an ordinary (ORIGIN) trigger fires for
// the application only and passes, as does one disabled for the move; a
// unique index beyond the primary key is named in a warning on each side,
// and so is an identity column no index leads with (the cutover's max()).
func TestPreflightTriggersAndUniques(t *testing.T) {
	src, dst := preflightPair(t)
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `CREATE FUNCTION bump() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.name := NEW.name || '+'; RETURN NEW; END$$;
			CREATE TRIGGER bump BEFORE INSERT ON users FOR EACH ROW EXECUTE FUNCTION bump();
			CREATE TRIGGER bump_always BEFORE UPDATE ON users FOR EACH ROW EXECUTE FUNCTION bump();
			ALTER TABLE users DISABLE TRIGGER bump_always;
			CREATE UNIQUE INDEX users_email ON users (email);
			ALTER TABLE users ADD COLUMN n bigint GENERATED BY DEFAULT AS IDENTITY`)
	}
	rep, err := runPreflight(t, src, dst, nil, nil, PreflightOptions{})
	if err != nil {
		t.Fatalf("origin and disabled triggers refused: %v", err)
	}
	var uniques []string
	for _, w := range rep.Warnings {
		if strings.Contains(w.Message, "unique index") {
			uniques = append(uniques, w.Shard+": "+w.Message)
		}
	}
	var noIndex []string
	for _, w := range rep.Warnings {
		if strings.Contains(w.Message, "no index leads with it") {
			noIndex = append(noIndex, w.Shard+": "+w.Message)
		}
	}
	if len(noIndex) != 2 || !strings.Contains(noIndex[0], `column "n" draws from a sequence but no index leads with it`) ||
		!strings.Contains(noIndex[0], `CREATE INDEX CONCURRENTLY ON "public"."users" ("n")`) {
		t.Fatalf("warnings of sequence columns without an index: %q; want users.n on each side (orders.id, the primary key, is indexed)", noIndex)
	}
	want := `unique index "users_email" beyond the primary key (CREATE UNIQUE INDEX users_email ON public.users USING btree (email))`
	if len(uniques) != 2 || !strings.Contains(uniques[0], want) || !strings.HasPrefix(uniques[0], "source") || !strings.HasPrefix(uniques[1], "target") {
		t.Fatalf("unique warnings %q, want one per side with %q", uniques, want)
	}
}
