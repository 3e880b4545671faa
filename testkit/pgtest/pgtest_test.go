package pgtest

import (
	"context"
	"net/http"
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// Two tests create the same table in their own databases: neither sees the
// other's rows.
func TestDatabasesAreIsolated(t *testing.T) {
	a := NewDB(t, 0)
	b := NewDB(t, 0)
	if a.Name == b.Name {
		t.Fatalf("two NewDB calls returned the same database %s", a.Name)
	}
	a.Exec(t, "CREATE TABLE users (id bigint PRIMARY KEY)")
	b.Exec(t, "CREATE TABLE users (id bigint PRIMARY KEY)")
	a.Exec(t, "INSERT INTO users SELECT generate_series(1, 10)")
	b.Exec(t, "INSERT INTO users VALUES (1)")
	if n := a.QueryInt64(t, "SELECT count(*) FROM users"); n != 10 {
		t.Fatalf("database a has %d rows, want 10", n)
	}
	if n := b.QueryInt64(t, "SELECT count(*) FROM users"); n != 1 {
		t.Fatalf("database b has %d rows, want 1", n)
	}
}

func TestServersAreSeparateAndLogical(t *testing.T) {
	a := NewDB(t, 0)
	b := NewDB(t, 1)
	if a.Server.Port == b.Server.Port {
		t.Fatalf("servers 0 and 1 share port %d", a.Server.Port)
	}
	var level string
	if err := b.Pool.QueryRow(context.Background(), "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level = %s, want logical", level)
	}
}

func TestTemporalDevServerAnswers(t *testing.T) {
	tt := Temporal(t)
	resp, err := http.Get(tt.UIURL())
	if err != nil {
		t.Fatalf("UI at %s: %v", tt.UIURL(), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("UI status %d", resp.StatusCode)
	}
}

// StopTemporal stops the dev server alone: the next Temporal call starts
// another one, and the PostgreSQL servers (with their databases) stay.
func TestStopTemporalKeepsThePostgreSQLServers(t *testing.T) {
	db := NewDB(t, 0)
	first := Temporal(t)
	StopTemporal()
	if first.Running() {
		t.Fatalf("the dev server (pid %d) still runs after StopTemporal", first.Pid)
	}
	if n := db.QueryInt64(t, "SELECT 1"); n != 1 {
		t.Fatalf("SELECT 1 = %d after StopTemporal", n)
	}
	if s := Server(t, 0); s.Port != db.Server.Port {
		t.Fatalf("server 0 moved from port %d to %d: it was restarted", db.Server.Port, s.Port)
	}
	second := Temporal(t)
	if second.Pid == first.Pid || !second.Running() {
		t.Fatalf("Temporal after StopTemporal: pid %d (running %v), the stopped one was %d", second.Pid, second.Running(), first.Pid)
	}
	resp, err := http.Get(second.UIURL())
	if err != nil {
		t.Fatalf("the new dev server's UI at %s: %v", second.UIURL(), err)
	}
	resp.Body.Close()
}
