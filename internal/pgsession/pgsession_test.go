package pgsession_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// A database whose defaults differ in every pinned setting: sessions made
// from Parse* run under Settings, plain and replication ones alike (a
// walsender formats pgoutput's values under its own), while a session made
// without them gets the database's defaults (so the test can fail).
func TestPinnedOverDatabaseDefaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := pgtest.NewDB(t, 0)
	db.SetDefaults(t, pgtest.OddDefaults[0])
	db.SetDefaults(t, map[string]string{"row_security": "on"})

	raw, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	var ds string
	if err := raw.QueryRow(ctx, "SHOW DateStyle").Scan(&ds); err != nil || ds != pgtest.OddDefaults[0]["DateStyle"] {
		t.Fatalf("an unpinned session has DateStyle %q (%v), want the database's %q: the test sets nothing", ds, err, pgtest.OddDefaults[0]["DateStyle"])
	}

	cfg, err := pgsession.ParseConnConfig(db.DSN + "&datestyle=German")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rcfg, err := pgsession.ParseConfig(db.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	repl, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(ctx)
	for _, s := range pgsession.Settings {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", s.Name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != s.Value {
			t.Errorf("plain session: %s = %q, want %q", s.Name, got, s.Value)
		}
		res, err := repl.Exec(ctx, "SHOW "+s.Name).ReadAll()
		if err != nil {
			t.Fatalf("replication session: SHOW %s: %v", s.Name, err)
		}
		if got := string(res[0].Rows[0][0]); got != s.Value {
			t.Errorf("replication session: %s = %q, want %q", s.Name, got, s.Value)
		}
	}
	// row_security off: a query a policy would filter fails instead.
	db.Exec(t, `CREATE TABLE t (k int); INSERT INTO t VALUES (1); ALTER TABLE t ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY`)
	role := pgtest.RoleName("rls")
	pgtest.CreateRole(t, role, db)
	db.Exec(t, "ALTER TABLE t OWNER TO "+pgx.Identifier{role}.Sanitize())
	as := db.As(t, role)
	var n int
	if err := as.Pool.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 0 {
		t.Fatalf("unpinned owner under FORCE: count %d (%v), want 0 rows hidden by the policy", n, err)
	}
	pc, err := pgsession.ParseConnConfig(as.DSN)
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := pgx.ConnectConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close(ctx)
	err = pinned.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n)
	var pe *pgconn.PgError
	if !(errors.As(err, &pe) && pe.Code == pgerr.CodeInsufficientPrivilege) {
		t.Fatalf("pinned session under FORCE: count %d, err %v; want 42501 (query would be affected by row-level security policy)", n, err)
	}
}

// A setting dropped on the way (as a connection pooler told to ignore
// startup parameters does) fails the connection, naming the setting,
// instead of leaving the session on the database's default.
func TestDroppedSettingFailsTheConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := pgtest.NewDB(t, 0)
	db.SetDefaults(t, pgtest.OddDefaults[0])
	for _, repl := range []bool{false, true} {
		dsn := db.DSN
		if repl {
			dsn = db.ReplicationDSN()
		}
		cfg, err := pgsession.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("replication %v: pinned: %v", repl, err)
		}
		conn.Close(ctx)
		delete(cfg.RuntimeParams, "extra_float_digits")
		conn, err = pgconn.ConnectConfig(ctx, cfg)
		if err == nil {
			conn.Close(ctx)
			t.Fatalf("replication %v: connected with extra_float_digits dropped", repl)
		}
		if !strings.Contains(err.Error(), `extra_float_digits = "0", not "3"`) {
			t.Fatalf("replication %v: %v; want the setting named", repl, err)
		}
	}
}
