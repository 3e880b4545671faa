package pgddl

import (
	"context"
	"os"
	"testing"

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
