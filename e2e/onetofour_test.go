//go:build e2e

package e2e

// From one database to four shards (issue #14), as the README tells it:
// init on the existing database, schema sync to the new servers, then
// migrations, with the Go router and the Python router (examples/python,
// built on docs/contract.md only) writing throughout.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// newOneDatabase is one database (shard1) holding users and orders, and
// three empty servers (shard2..shard4) with no table, all in the worker's
// configuration; the control database has no topology yet.
func newOneDatabase(t *testing.T, users int) *cluster {
	t.Helper()
	tmp := pgtest.Temporal(t)
	c := &cluster{t: t, dbs: map[string]*pgtest.DB{}, pools: map[string]*pgxpool.Pool{}, users: users, dir: pgtest.TempDir(t, "e2e")}
	c.ctl = pgtest.NewDB(t, 4)
	for i := 1; i <= 4; i++ {
		db := pgtest.NewDB(t, i-1)
		c.dbs[shard(i)], c.pools[shard(i)] = db, db.Pool
	}
	one := c.dbs[shard(1)]
	one.Exec(t, schema)
	one.Exec(t, fmt.Sprintf(`INSERT INTO users SELECT g, 'v0-' || g, 0 FROM generate_series(1, %d) g`, users))
	one.Exec(t, fmt.Sprintf(`INSERT INTO orders SELECT g, o, g %% 97 FROM generate_series(1, %d) g, generate_series(1, 1 + g %% 2) o`, users))
	one.Exec(t, `ANALYZE`)
	c.orders = one.QueryInt64(t, `SELECT count(*) FROM orders`)
	c.store = topology.NewStore(c.ctl.Pool)
	c.connect(tmp)
	return c
}

// TestOneDatabaseToFourShards runs the README's path from one database to
// four shards (init, schema sync, one rebalance) under live writes of both
// routers: 0 acknowledged writes lost
// or duplicated, every row on its owner, reshard check placement clean.
func TestOneDatabaseToFourShards(t *testing.T) {
	wall(t)
	py := pythonWithPsycopg(t)
	c := newOneDatabase(t, 6_000)
	// 1. The existing database becomes the keyspace's first shard.
	if out, code := c.cli("init", "--shards", shard(1), "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("init on the existing database: exit %d\n%s", code, out)
	}
	c.startWorker()
	c.startWriters()
	pyw := startPythonWriter(t, py, c, "3000001-3000300")

	// 2. The new servers get the tables; 3. one add-node each.
	start := time.Now()
	for i := 2; i <= 4; i++ {
		if out, code := c.cli("schema", "sync", shard(i)); code != 0 || !strings.Contains(out, "created public.users") {
			t.Fatalf("schema sync %s: exit %d\n%s", shard(i), code, out)
		}
	}
	// One rebalance, as the README does it: 3/4 of the space moves, each
	// range once.
	out, code := c.cli("rebalance", "--add", "shard2,shard3,shard4", "--id", "one2four", "--grace", "2s")
	if code != 0 {
		t.Fatalf("rebalance: exit %d\n%s", code, out)
	}
	st := c.wait(c.tc.GetWorkflow(context.Background(), workflows.MigrationWorkflowID("one2four"), ""), 8*time.Minute)
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("rebalance ended %s: %s\n%s", st.Phase, st.Error, c.workerLogs())
	}
	if st.MovedFraction < 0.74 || st.MovedFraction > 0.76 {
		t.Fatalf("moved fraction %.4f, want 3/4", st.MovedFraction)
	}
	t.Logf("rebalance 1 → 4: moved %.3f of the space, moves: %s", st.MovedFraction, summary(st))
	t.Logf("one database → four shards in %s", time.Since(start).Round(time.Second))
	time.Sleep(time.Second)
	sum, l, _ := pyw.finish()
	c.stopWriters()

	ctx := context.Background()
	cur, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := cur.Ring.Shards(); len(got) != 4 || len(cur.Migrating()) != 0 {
		t.Fatalf("final ring %v, %d ranges migrating", got, len(cur.Migrating()))
	}
	c.checkPlacement(cur) // every user and order on its owner once, none lost; the Go writers' ledger
	for name, db := range c.dbs {
		t.Logf("%s: %d users", name, db.QueryInt64(t, `SELECT count(*) FROM users`))
	}
	pm, err := l.Check(ctx, usersTable, c.pools, cur.Ring.OwnerInt64)
	if err != nil {
		t.Fatal(err)
	}
	if len(pm) > 0 {
		t.Fatalf("%d writes the Python router acknowledged are missing or wrong, e.g. %s", len(pm), pm[0])
	}
	t.Logf("Python router: %d acknowledged, %d unknown, %d fence retries, versions %v; Go router: %d acknowledged",
		sum.Acked, sum.Unknown, sum.FenceRetries, sum.Versions, c.stats.Acked.Load())
	if out, code := c.cli("check", "placement"); code != 0 {
		t.Fatalf("check placement after the three moves: exit %d\n%s", code, out)
	}
}
