package devenv_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/devenv"
)

// clientConn connects the way a worker does: the shard's DSN from the
// reshard.yaml Up wrote, with the cluster's password.
func clientConn(t *testing.T, ctx context.Context, c *devenv.Cluster, shard string) *pgx.Conn {
	t.Helper()
	wc, err := devenv.ReadWorkerConfig(c.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	pw, err := wc.Password()
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(wc.Shards[shard])
	if err != nil {
		t.Fatalf("shard DSN of %s: %v", shard, err)
	}
	u.User = url.UserPassword(u.User.Username(), pw)
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatalf("connect to %s by its reshard.yaml DSN: %v", shard, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

type serverFacts struct {
	port      int
	recovery  bool
	timeline  int
	syncState string // of the standby in the primary's pg_stat_replication
	rows      int
}

func facts(t *testing.T, ctx context.Context, conn *pgx.Conn) serverFacts {
	t.Helper()
	var f serverFacts
	err := conn.QueryRow(ctx, `SELECT current_setting('port')::int, pg_is_in_recovery(),
		('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int,
		coalesce((SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'), ''),
		(SELECT count(*) FROM acked)`, devenv.StandbyAppName).Scan(&f.port, &f.recovery, &f.timeline, &f.syncState, &f.rows)
	if err != nil {
		t.Fatalf("read server facts: %v", err)
	}
	return f
}

// TestStandbyFailover gives shard1 a synchronous standby, fails it over
// (primary killed), then switches back (clean stop), each time through
// reshard.yaml's DSN: the acknowledged rows are on the new primary, it is on
// the next timeline, and it has a synchronous standby again.
func TestStandbyFailover(t *testing.T) {
	requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := newStateDir(t)
	t.Cleanup(func() { _ = devenv.Destroy(context.Background(), dir) })
	if _, err := devenv.Up(ctx, devenv.Options{StateDir: dir, Shards: 1, Fast: true}); err != nil {
		t.Fatalf("up: %v", err)
	}

	if _, err := devenv.Failover(ctx, dir, "shard1", devenv.FailoverOptions{}); !errors.Is(err, devenv.ErrNoStandby) || !strings.Contains(err.Error(), "reshard dev standby shard1") {
		t.Fatalf("failover without a standby: %v, want ErrNoStandby naming reshard dev standby shard1", err)
	}
	if _, err := devenv.AddStandby(ctx, dir, "shard9", nil); !errors.Is(err, devenv.ErrNoShard) {
		t.Fatalf("standby of shard9: %v, want ErrNoShard", err)
	}

	c, err := devenv.AddStandby(ctx, dir, "shard1", nil)
	if err != nil {
		t.Fatalf("standby: %v", err)
	}
	n, _ := c.Node("shard1")
	if n.Standby == nil {
		t.Fatal("shard1 has no standby recorded")
	}
	primaryPort, standbyPort := n.Port, n.Standby.Port
	wc, _ := devenv.ReadWorkerConfig(c.ConfigPath())
	if d := wc.Shards["shard1"]; !strings.Contains(d, "target_session_attrs=read-write") || strings.Count(d, "127.0.0.1:") != 2 {
		t.Fatalf("shard1 DSN %q: want both servers and target_session_attrs=read-write", d)
	}
	if d := wc.Control; strings.Contains(d, ",") {
		t.Fatalf("control has no standby but DSN %q lists several hosts", d)
	}

	conn := clientConn(t, ctx, c, "shard1")
	if _, err := conn.Exec(ctx, "CREATE TABLE acked (id int PRIMARY KEY); INSERT INTO acked SELECT generate_series(1, 100)"); err != nil {
		t.Fatal(err)
	}
	f := facts(t, ctx, conn)
	if f.port != primaryPort || f.recovery || f.timeline != 1 || f.syncState != "sync" {
		t.Fatalf("before failover: %+v, want port %d, not in recovery, timeline 1, standby sync", f, primaryPort)
	}
	conn.Close(ctx)

	step := func(name string, opts devenv.FailoverOptions, wantPort, wantTimeline, wantRows int) {
		t.Helper()
		start := time.Now()
		r, err := devenv.Failover(ctx, dir, "shard1", opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: promoted port %d in %s, timeline %d, whole step %s", name, r.NewPort, r.PromoteTook, r.Timeline, time.Since(start))
		if r.NewPort != wantPort || r.Timeline != wantTimeline || !r.StandbyRebuilt {
			t.Fatalf("%s: %+v, want port %d timeline %d rebuilt", name, r, wantPort, wantTimeline)
		}
		c, err := devenv.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		conn := clientConn(t, ctx, c, "shard1")
		f := facts(t, ctx, conn)
		if f.port != wantPort || f.recovery || f.timeline != wantTimeline || f.rows != wantRows || f.syncState != "sync" {
			t.Fatalf("%s: %+v, want port %d, primary, timeline %d, %d rows, a sync standby", name, f, wantPort, wantTimeline, wantRows)
		}
		// Writes go on (a synchronous commit is answered by the rebuilt standby).
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		if _, err := conn.Exec(wctx, "INSERT INTO acked VALUES ($1)", wantRows+1); err != nil {
			t.Fatalf("%s: write after it: %v", name, err)
		}
		conn.Close(ctx)
	}
	step("failover", devenv.FailoverOptions{}, standbyPort, 2, 100)
	step("switchover", devenv.FailoverOptions{Switchover: true}, primaryPort, 3, 101)

	// Down and up again: the standby comes back with its primary.
	if err := devenv.Down(ctx, dir); err != nil {
		t.Fatalf("down: %v", err)
	}
	c, err = devenv.Up(ctx, devenv.Options{StateDir: dir})
	if err != nil {
		t.Fatalf("up after down: %v", err)
	}
	conn = clientConn(t, ctx, c, "shard1")
	if f := facts(t, ctx, conn); f.port != primaryPort || f.syncState != "sync" || f.rows != 102 {
		t.Fatalf("after down and up: %+v, want port %d with a sync standby and 102 rows", f, primaryPort)
	}
}
