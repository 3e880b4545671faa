package pgddl

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// TestConcurrentApply: eight sessions installing the same schema at once all
// succeed (without the lock, CREATE SCHEMA IF NOT EXISTS fails some of them
// on the catalog's unique index), and no lock_timeout is left behind.
func TestConcurrentApply(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	const ddl = `CREATE SCHEMA IF NOT EXISTS reshard; CREATE TABLE IF NOT EXISTS reshard.t (id int PRIMARY KEY)`
	for round := range 3 {
		var g errgroup.Group
		for range 8 {
			g.Go(func() error { return Apply(context.Background(), db.Pool, ddl, 0) })
		}
		if err := g.Wait(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		db.Exec(t, `DROP SCHEMA reshard CASCADE`)
	}
	if err := Apply(context.Background(), db.Pool, ddl, 1500_000_000); err != nil {
		t.Fatal(err)
	}
	var lt string
	if err := db.Pool.QueryRow(context.Background(), "SHOW lock_timeout").Scan(&lt); err != nil || lt != "0" {
		t.Fatalf("lock_timeout after Apply: %q %v", lt, err)
	}
}

// TestApplyAfterTheSchemaWasLookedUpMissing: a session that dropped the
// schema and looked it up while it was missing, then waited for the lock
// while its twin created the schema, applies the same DDL cleanly. With the
// lock taken inside the DDL's transaction, the transaction did not see the
// twin's commit and CREATE SCHEMA IF NOT EXISTS failed on
// pg_namespace_nspname_index (23505), as Joins on a target shared by four
// moves did in e2e and CI runs.
func TestApplyAfterTheSchemaWasLookedUpMissing(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	const ddl = `CREATE SCHEMA IF NOT EXISTS reshard; CREATE TABLE IF NOT EXISTS reshard.t (id int PRIMARY KEY)`
	cfg := db.Pool.Config()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	// The session drops the schema an earlier install made and looks it
	// up while it is missing, leaving its catalog cache a state from which
	// the old Apply's CREATE SCHEMA IF NOT EXISTS failed.
	db.Exec(t, ddl)
	if _, err := one.Exec(ctx, `DROP SCHEMA reshard CASCADE`); err != nil {
		t.Fatal(err)
	}
	var pid int
	var ns, rel *string
	if err := one.QueryRow(ctx, `SELECT pg_backend_pid(), to_regnamespace('reshard')::text, to_regclass('reshard.t')::text`).Scan(&pid, &ns, &rel); err != nil || ns != nil || rel != nil {
		t.Fatalf("lookup before the schema exists: %v %v %v", ns, rel, err)
	}

	// The twin: holds the lock while it creates the schema.
	twin, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer twin.Rollback(ctx)
	if _, err := twin.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey); err != nil {
		t.Fatal(err)
	}
	if _, err := twin.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Apply(ctx, one, ddl, 0) }()
	waiting := false
	for deadline := time.Now().Add(10 * time.Second); !waiting && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if !waiting {
		t.Fatal("Apply never waited for the lock the twin holds")
	}
	if err := twin.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Apply after the twin created the schema: %v", err)
	}
	var locks int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&locks); err != nil || locks != 0 {
		t.Fatalf("advisory locks left after Apply: %d %v", locks, err)
	}
}
