// Package pgtest gives tests real PostgreSQL databases and a real Temporal dev
// server. Servers are throwaway, started once per test package on first use and
// stopped when the package's tests end (call Run from TestMain).
//
// Outside CI a missing binary skips the test with the reason; with CI=true it
// fails, so a green CI run always means the integration tests ran.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgsession"
)

var (
	mu       sync.Mutex
	pg       *devenv.PG
	pgErr    error
	root     string
	servers  = map[int]*devenv.Server{}
	temporal *devenv.Temporal
	tcmd     *exec.Cmd
	tErr     error
	dbSeq    atomic.Int64
)

// Run runs the package's tests, then stops every server they started. Use it
// as: func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }.
func Run(m *testing.M) int {
	code := m.Run()
	Shutdown()
	return code
}

// Shutdown stops every server this process started and removes their files.
func Shutdown() {
	mu.Lock()
	defer mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range servers {
		_ = pg.Kill(ctx, *s)
	}
	servers = map[int]*devenv.Server{}
	stopTemporal()
	if root != "" {
		os.RemoveAll(root)
		root = ""
	}
}

// StopTemporal stops the package's Temporal dev server, if one runs, and
// leaves the PostgreSQL servers running: the next Temporal call starts a
// fresh one (in memory: no workflow, no poller of an earlier test's worker).
// For a test whose workers or workflows must not reach the tests after it:
// t.Cleanup(pgtest.StopTemporal). The databases need no such thing (NewDB
// gives each test its own, dropped at its end); restarting the PostgreSQL
// servers too (Shutdown) costs about 6 s of initdb and start-up on 2 cores.
func StopTemporal() {
	mu.Lock()
	defer mu.Unlock()
	stopTemporal()
}

func stopTemporal() {
	if temporal != nil {
		_ = devenv.StopTemporal(*temporal)
		if tcmd != nil {
			_, _ = tcmd.Process.Wait()
		}
		temporal, tcmd = nil, nil
	}
}

// Unavailable is for a missing binary or service: it skips the test outside
// CI and fails it with CI=true.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("integration test needs it and CI=true: %v", err)
	}
	t.Skipf("skipping integration test: %v", err)
}

// TempDir is a directory the servers' OS user can reach, removed when the
// test ends. As root it is under /tmp, whatever TMPDIR says: the postgres
// user must be able to traverse every parent (t.TempDir makes 0700 ones).
func TempDir(t testing.TB, prefix string) string {
	t.Helper()
	d, err := mkdirReachable(prefix)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func mkdirReachable(prefix string) (string, error) {
	base := ""
	if os.Geteuid() == 0 {
		base = "/tmp"
	}
	d, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o755); err != nil {
		return "", err
	}
	return d, nil
}

func workdir() (string, error) {
	if root != "" {
		return root, nil
	}
	d, err := mkdirReachable("reshard-pgtest-")
	if err != nil {
		return "", err
	}
	root = d
	return d, nil
}

// Server returns throwaway server i (0-based), starting it on first use.
// Tests that need several shards use several servers.
func Server(t testing.TB, i int) *devenv.Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if s, ok := servers[i]; ok {
		return s
	}
	if pg == nil && pgErr == nil {
		pg, pgErr = devenv.NewPG()
	}
	if pgErr != nil {
		Unavailable(t, pgErr)
	}
	dir, err := workdir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := devenv.FreePort()
		if err != nil {
			t.Fatalf("pgtest: free port: %v", err)
		}
		s := &devenv.Server{Name: fmt.Sprintf("pg%d", i), Port: port, DataDir: filepath.Join(dir, fmt.Sprintf("pg%d", i), "data")}
		if err := os.MkdirAll(filepath.Dir(s.DataDir), 0o755); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if err := pg.Init(ctx, *s, devenv.ServerOptions{Fast: true}); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if err := pg.SetPort(*s); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if lastErr = pg.Start(ctx, *s); lastErr == nil {
			servers[i] = s
			return s
		}
	}
	t.Fatalf("pgtest: start server %d: %v", i, lastErr)
	return nil
}

// PG returns the binaries runner, for tests that stop or kill servers.
func PG(t testing.TB) *devenv.PG {
	t.Helper()
	Server(t, 0)
	return pg
}

// DB is a fresh database on a throwaway server, dropped when the test ends.
type DB struct {
	Name   string
	Server *devenv.Server
	// DSN connects to this database (trust authentication, no password).
	DSN  string
	Pool *pgxpool.Pool
}

// NewDB creates a fresh, empty database on server i. Two tests never share one.
func NewDB(t testing.TB, server int) *DB {
	t.Helper()
	return NewDBOn(t, Server(t, server))
}

// NewDBOn is NewDB on server s (one of a test's own: OwnServer), which
// must be running.
func NewDBOn(t testing.TB, s *devenv.Server) *DB {
	t.Helper()
	name := fmt.Sprintf("t_%s_%d", sanitize(t.Name()), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, s.DSN("postgres", false))
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", s.Name, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	db := &DB{Name: name, Server: s, DSN: s.DSN(name, false)}
	db.Pool, err = pgxpool.New(ctx, db.DSN)
	if err != nil {
		t.Fatalf("pgtest: pool for %s: %v", name, err)
	}
	t.Cleanup(func() {
		db.Pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, s.DSN("postgres", false))
		if err != nil {
			return // the server may have been stopped by the test
		}
		defer c.Close(ctx)
		// Slots pin the database; drop any a test left behind.
		_, _ = c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, name)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return db
}

func sanitize(s string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// Exec runs SQL on the database and fails the test on error.
func (db *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec on %s: %v\n%s", db.Name, err, sql)
	}
}

// QueryInt64 runs a query returning one int64 and fails the test on error.
func (db *DB) QueryInt64(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var v int64
	if err := db.Pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("query on %s: %v\n%s", db.Name, err, sql)
	}
	return v
}

// Conn opens a dedicated connection, closed when the test ends.
func (db *DB) Conn(t testing.TB) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), db.DSN)
	if err != nil {
		t.Fatalf("connect to %s: %v", db.Name, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// ReplicationDSN is the DSN of a replication connection (replication=database).
func (db *DB) ReplicationDSN() string { return db.DSN + "&replication=database" }

// Temporal returns a Temporal dev server (in memory) shared by the package,
// starting it on first use.
func Temporal(t testing.TB) devenv.Temporal {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if temporal != nil {
		return *temporal
	}
	if tErr != nil {
		// A server that failed to start is a failure, not a missing binary.
		t.Fatalf("pgtest: temporal dev server did not start earlier: %v", tErr)
	}
	if _, err := devenv.FindTemporal(); err != nil {
		Unavailable(t, err)
	}
	dir, err := workdir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The dev server also binds a few ports of its own choosing (HTTP API,
	// metrics, internal services), each picked free and then bound, as ours
	// are: a server of another test package starting at the same moment can
	// take one in between, and the dev server exits. Such a start is retried
	// on fresh ports.
	var (
		tt  devenv.Temporal
		cmd *exec.Cmd
	)
	for attempt := 1; ; attempt++ {
		ports, err := devenv.FreePorts(2)
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		tt, cmd, err = devenv.StartTemporal(ctx, devenv.Temporal{Port: ports[0], UIPort: ports[1], Log: filepath.Join(dir, "temporal.log")})
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			tErr = err
			t.Fatalf("pgtest: %v", err)
		}
		t.Logf("pgtest: temporal dev server did not start (attempt %d), retrying on other ports: %v", attempt, err)
	}
	temporal, tcmd = &tt, cmd
	return tt
}

// As is the same database reached as role (trust authentication: no
// password), with its own pool closed when the test ends. Exec and the
// queries of the result run as that role.
func (db *DB) As(t testing.TB, role string) *DB {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.User = url.User(role)
	cfg.ConnConfig.User = role
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool for %s as %s: %v", db.Name, role, err)
	}
	t.Cleanup(pool.Close)
	return &DB{Name: db.Name, Server: db.Server, DSN: u.String(), Pool: pool}
}

// RoleName is prefix made unique to this test run (roles belong to a
// server, which the tests of a package share).
func RoleName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), dbSeq.Add(1))
}

// CreateRole creates the login role name on the servers of dbs. When the test
// ends, everything it owns or was granted in dbs is dropped with it.
func CreateRole(t testing.TB, name string, dbs ...*DB) {
	t.Helper()
	q := pgx.Identifier{name}.Sanitize()
	servers := map[*devenv.Server]bool{}
	for _, db := range dbs {
		if !servers[db.Server] {
			servers[db.Server] = true
			db.Exec(t, "CREATE ROLE "+q+" LOGIN")
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, d := range dbs {
			if c, err := pgx.Connect(ctx, d.Server.DSN(d.Name, false)); err == nil {
				_, _ = c.Exec(ctx, "DROP OWNED BY "+q+" CASCADE")
				c.Close(ctx)
			}
		}
		for s := range servers {
			if c, err := pgx.Connect(ctx, s.DSN("postgres", false)); err == nil {
				_, _ = c.Exec(ctx, "DROP OWNED BY "+q+" CASCADE")
				_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS "+q)
				c.Close(ctx)
			}
		}
	})
}

// Psql runs a SQL script of the repository (path relative to its root, say
// deploy/reshard-role.sql) with psql on the database, as the superuser, with
// the psql variables vars, and fails the test on error.
func (db *DB) Psql(t testing.TB, script string, vars map[string]string) {
	t.Helper()
	psql, err := findPsql()
	if err != nil {
		Unavailable(t, err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	args := []string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db.Server.DSN(db.Name, false), "-f", filepath.Join(root, script)}
	for k, v := range vars {
		args = append(args, "-v", k+"="+v)
	}
	out, err := exec.Command(psql, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("psql -f %s on %s: %v\n%s", script, db.Name, err, out)
	}
}

// findPsql finds psql beside the server binaries (the directory pg_ctl
// resolves to, when it is a link), else on PATH.
func findPsql() (string, error) {
	bin, err := devenv.FindPGBin()
	if err != nil {
		return "", err
	}
	for _, d := range []string{bin, filepath.Dir(evalSymlinks(filepath.Join(bin, "pg_ctl")))} {
		if p := filepath.Join(d, "psql"); fileExists(p) {
			return p, nil
		}
	}
	return exec.LookPath("psql")
}

func evalSymlinks(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// moduleRoot is the directory holding go.mod, above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		d = up
	}
}

// OddDefaults are two sets of database defaults unlike PostgreSQL's own, and
// unlike each other, for every setting that shapes a value's text form (the
// ones internal/pgsession pins): set one on each shard (SetDefaults) and a
// value that travels as text under the servers' defaults arrives changed —
// day and month swapped, a float rounded, a timestamptz shifted, an array's
// NULL read as the string NULL, an xml fragment refused.
var OddDefaults = [2]map[string]string{{
	"DateStyle": "SQL, DMY", "IntervalStyle": "sql_standard", "TimeZone": "Asia/Kolkata",
	"extra_float_digits": "0", "bytea_output": "escape", "xmlbinary": "hex", "xmloption": "document",
	"array_nulls": "off", "standard_conforming_strings": "off", "lc_monetary": "C.UTF-8",
}, {
	"DateStyle": "Postgres, MDY", "IntervalStyle": "postgres_verbose", "TimeZone": "America/St_Johns",
	"extra_float_digits": "-4", "bytea_output": "escape", "xmlbinary": "hex", "xmloption": "document",
	"array_nulls": "off", "standard_conforming_strings": "off", "lc_monetary": "C.UTF-8",
}}

// SetDefaults makes settings the database's defaults (ALTER DATABASE ...
// SET), as a user's server would have them: they apply to the sessions
// opened from now on, replication connections included.
func (db *DB) SetDefaults(t testing.TB, settings map[string]string) {
	t.Helper()
	for k, v := range settings {
		db.Exec(t, "ALTER DATABASE "+pgx.Identifier{db.Name}.Sanitize()+" SET "+k+" = '"+strings.ReplaceAll(v, "'", "''")+"'")
	}
}

// Pinned is the same database with a pool whose sessions run under
// internal/pgsession's settings, as reshard's own pools do (row_security
// off among them), closed when the test ends.
func (db *DB) Pinned(t testing.TB) *DB {
	t.Helper()
	cfg, err := pgsession.ParsePoolConfig(db.DSN)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pinned pool for %s: %v", db.Name, err)
	}
	t.Cleanup(pool.Close)
	return &DB{Name: db.Name, Server: db.Server, DSN: db.DSN, Pool: pool}
}

// PoolWith is a pool on the database whose sessions start with settings
// (connection parameters: the caller's pool, set as a user might), closed
// when the test ends.
func (db *DB) PoolWith(t testing.TB, settings map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	for k, v := range settings {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool for %s: %v", db.Name, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ValuesTable is the DDL of a table of every type whose text form a session
// setting shapes (internal/pgsession), keyed by key (bigint).
func ValuesTable(name, key string) string {
	return "CREATE TABLE " + pgx.Identifier{name}.Sanitize() + " (" + pgx.Identifier{key}.Sanitize() + ` bigint PRIMARY KEY, d date, ts timestamptz, tsn timestamp,
	iv interval, f4 real, f8 double precision, b bytea, m money, x xml, a text[], n numeric)`
}

// ValuesColumns are ValuesTable's columns after the key.
const ValuesColumns = "d, ts, tsn, iv, f4, f8, b, m, x, a, n"

// ValueRows are rows of ValuesTable after the key: edge cases of each type,
// written without literals that a session's settings parse (the writing
// session may have OddDefaults too: xmloption document,
// standard_conforming_strings off, DateStyle DMY).
var ValueRows = []string{
	`make_date(2024, 3, 4), make_timestamptz(2024, 3, 4, 5, 6, 7.123456, 'UTC'), make_timestamp(2024, 3, 4, 5, 6, 7.5),
	 make_interval(1, 2, 0, 3, 4, 5, 6.789), '0.1'::real, '0.30000000000000004'::float8, decode('00ff5c27', 'hex'),
	 12345.67::numeric::money, XMLPARSE(CONTENT '<a>x</a>text'), ARRAY['NULL', NULL, 'a,b', ''], 0.1`,
	`make_date(1999, 12, 31), make_timestamptz(2024, 10, 27, 1, 30, 0, 'Europe/London'), make_timestamp(1999, 12, 31, 23, 59, 59.999999),
	 make_interval(days => 1, hours => -2), '3.4028235e38'::real, '1.7976931348623157e308'::float8, decode('', 'hex'),
	 (-0.01)::numeric::money, XMLPARSE(CONTENT 'only text'), ARRAY[NULL]::text[], -0.000001`,
	`make_date(-44, 3, 15), 'infinity'::timestamptz, '-infinity'::timestamp,
	 make_interval(days => -1, secs => -7384.5), '-0'::real, '-0'::float8, decode('5c78', 'hex'),
	 0::money, XMLPARSE(DOCUMENT '<d/>'), ARRAY['{}', '"', chr(92)], 'NaN'`,
	`make_date(2024, 12, 1), make_timestamptz(2000, 1, 2, 3, 4, 5, 'Asia/Kolkata'), make_timestamp(2000, 2, 29, 0, 0, 0),
	 -make_interval(years => 1, mins => 1), '1.17549435e-38'::real, 'NaN'::float8, decode('00', 'hex'),
	 NULL, NULL, ARRAY['x y'], 1e-20`,
	`make_date(2001, 2, 3), make_timestamptz(2001, 2, 3, 4, 5, 6, 'America/St_Johns'), make_timestamp(2001, 2, 3, 4, 5, 6),
	 make_interval(months => 13, secs => 0.000001), 'NaN'::real, 'Infinity'::float8, decode('ffff', 'hex'),
	 92233720368547758.07::money, NULL, NULL, NULL`,
	`NULL, NULL, NULL, NULL, 'Infinity'::real, '-Infinity'::float8, NULL, NULL, NULL, NULL, NULL`,
	`make_date(2024, 1, 13), make_timestamptz(2024, 1, 13, 12, 0, 0, 'UTC'), make_timestamp(2024, 1, 13, 12, 0, 0),
	 make_interval(secs => -0.5), '1e-45'::real, '5e-324'::float8, NULL, NULL, NULL, NULL, 123456789012345678901234567890.123`,
}

// RowsAsText lists "key|row as text" of table, ordered by key, read in a
// session under internal/pgsession's settings: the text form of every value,
// byte for byte, whatever the database's defaults.
func (db *DB) RowsAsText(t testing.TB, table, key string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgsession.ParseConnConfig(db.DSN)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", db.Name, err)
	}
	defer conn.Close(ctx)
	k := "v." + pgx.Identifier{key}.Sanitize()
	rows, err := conn.Query(ctx, "SELECT "+k+"::text || '|' || v::text FROM "+pgx.Identifier{table}.Sanitize()+" v ORDER BY "+k)
	if err == nil {
		var out []string
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err == nil {
			return out
		}
	}
	t.Fatalf("pgtest: rows of %s on %s: %v", table, db.Name, err)
	return nil
}

// DiffRows reports, line by line, where two RowsAsText differ.
func DiffRows(t testing.TB, what string, want, got []string) {
	t.Helper()
	for i := range max(len(want), len(got)) {
		var a, b string
		if i < len(want) {
			a = want[i]
		}
		if i < len(got) {
			b = got[i]
		}
		if a != b {
			t.Errorf("%s: row differs:\n want %s\n got  %s", what, a, b)
		}
	}
}

// Standby starts an asynchronous streaming standby of throwaway server i
// (pg_basebackup -R), killed when the test ends: its databases are the
// server's, each under the same name (NewDB's made before or after). It
// is asynchronous, so the server's other tests never wait for it, and
// made from the running server, so it costs a base backup, not an initdb.
func Standby(t testing.TB, i int) devenv.Server {
	t.Helper()
	primary := Server(t, i)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatalf("pgtest: free port: %v", err)
	}
	sb := devenv.Server{Name: primary.Name + "_standby", Port: port, DataDir: filepath.Join(TempDir(t, "reshard-standby-"), "data")}
	t.Cleanup(func() { _ = pg.Kill(context.Background(), sb) })
	if err := pg.StartAsyncStandby(ctx, *primary, sb); err != nil {
		t.Fatalf("pgtest: standby of %s: %v", primary.Name, err)
	}
	return sb
}

// OwnServer starts a server of the test's own (initdb, start), which it
// may stop, kill or promote without disturbing the package's shared
// servers; it is killed when the test ends.
func OwnServer(t testing.TB, name string) devenv.Server {
	t.Helper()
	p := PG(t)
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatalf("pgtest: free port: %v", err)
	}
	s := devenv.Server{Name: name, Port: port, DataDir: filepath.Join(TempDir(t, "reshard-"+name+"-"), "data")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.Init(ctx, s, devenv.ServerOptions{Fast: true}); err != nil {
		t.Fatalf("pgtest: init %s: %v", name, err)
	}
	if err := p.Start(ctx, s); err != nil {
		t.Fatalf("pgtest: start %s: %v", name, err)
	}
	t.Cleanup(func() { _ = p.Kill(context.Background(), s) })
	return s
}

// SyncStandby starts a synchronous streaming standby of primary (a server
// of the test's own: OwnServer), killed when the test ends, so that a
// commit acknowledged on the primary survives its failover. It returns the
// standby and a DSN of the database postgres that lists both servers and
// follows whichever is the primary (target_session_attrs=read-write).
func SyncStandby(t testing.TB, primary devenv.Server) (sb devenv.Server, both string) {
	t.Helper()
	p := PG(t)
	port, err := devenv.FreePort()
	if err != nil {
		t.Fatalf("pgtest: free port: %v", err)
	}
	sb = devenv.Server{Name: primary.Name + "_standby", Port: port, DataDir: filepath.Join(TempDir(t, "reshard-"+primary.Name+"-standby-"), "data")}
	t.Cleanup(func() { _ = p.Kill(context.Background(), sb) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := p.StartStandby(ctx, primary, sb); err != nil {
		t.Fatalf("pgtest: standby of %s: %v", primary.Name, err)
	}
	return sb, fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", primary.Port, sb.Port)
}
