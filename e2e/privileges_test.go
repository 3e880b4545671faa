package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// TestAddNodeAsLeastPrivilegedRole runs a whole add-node under live writes
// with reshard connected to every shard and to the control database as a
// role without superuser, granted only what deploy/reshard-role.sql grants
// (docs/operations.md, "Privileges"), and the application writing as the
// role that owns its tables: PLAN to CLEANUP through GRACE's reverse
// stream, no acknowledged write lost, every row on its owner. The writers'
// router reads the control database as the application's role too.
func TestAddNodeAsLeastPrivilegedRole(t *testing.T) {
	c, reshard, _ := leastPrivilegedCluster(t, 3_000)
	// Every stream, forward and reverse, catches up by SQL peeks whenever
	// it is behind at all: those need the role's privileges too.
	c.workerArgs = forceSQLCatchUp
	c.startWorker()
	c.startWriters()
	started := time.Now()
	req := c.request("e2e_priv")
	req.GracePeriod = new(3 * time.Second)
	st := c.wait(c.start(req), 2*time.Minute)
	c.stopWriters()
	t.Logf("add-node as %s: %s, moves: %s", reshard, time.Since(started).Round(time.Second), summary(st))
	checkState(t, st, true)
	c.checkData(st)
	// GRACE ran its reverse stream (slot and publication on the new owner,
	// origin on the old one), and no step was refused for want of a
	// privilege, not even one retried or given up on the way (a failed drop
	// logged and ignored).
	if reverse := c.refusedPrivileges(); reverse < len(st.Moves) {
		t.Errorf("%d reverse streams started in GRACE, want one per move (%d)", reverse, len(st.Moves))
	}
	// Forced, every catch-up is by SQL; as this role, each reads a
	// temporary copy of its slot ahead (pg_copy_logical_replication_slot
	// needs no more than the REPLICATION the stream has).
	if n, ahead := c.sqlCatchUps(), c.readAheadCatchUps(); n == 0 || ahead != n {
		t.Errorf("%d streams caught up by SQL, %d of them reading ahead: forced, there should be some, all reading ahead", n, ahead)
	} else {
		t.Logf("catch-ups by SQL, all reading ahead: %d", n)
	}
	// Nothing of the moves left on the shards: origins dropped with them.
	for name, db := range c.dbs {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'reshard%e2e_priv%'`); n != 0 {
			t.Errorf("%d replication origins of reshard left on %s", n, name)
		}
	}

}

// checkLeastPrivilegedStep checks a migration that ended DONE: every row on
// its owner in the current topology, topology check clean (run as the same
// role), and no slot, publication or replication origin of reshard left.
func (c *cluster) checkLeastPrivilegedStep(step string, st workflows.MigrationState) {
	t := c.t
	t.Helper()
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Migrating()) != 0 || cur.Version != st.Version {
		t.Fatalf("%s: topology v%d (state says v%d), %d ranges migrating", step, cur.Version, st.Version, len(cur.Migrating()))
	}
	c.checkPlacement(cur)
	if out, code := c.cli("topology", "check"); code != 0 {
		t.Fatalf("%s: topology check: exit %d\n%s", step, code, out)
	}
	for name, db := range c.dbs {
		for what, q := range map[string]string{
			"slots":        `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`,
			"publications": `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'reshard%'`,
			"origins":      `SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'reshard%'`,
		} {
			if n := db.QueryInt64(t, q); n != 0 {
				t.Errorf("%s: %d %s of reshard left on %s", step, n, what, name)
			}
		}
	}
}

// leastPrivilegedCluster is the e2e cluster with reshard connected to every
// shard and to the control database as a role without superuser, granted
// only what deploy/reshard-role.sql grants, and the application (writers,
// routers) as the role that owns its tables; admin are the shards as the
// superuser that made them (to break things by hand).
func leastPrivilegedCluster(t *testing.T, users int) (c *cluster, reshard string, admin map[string]*pgtest.DB) {
	reshard, app := pgtest.RoleName("reshard"), pgtest.RoleName("app")
	admin = map[string]*pgtest.DB{}
	c = buildCluster(t, users, 0, pgtest.Temporal(t), func(c *cluster) {
		all := []*pgtest.DB{c.ctl}
		for _, db := range c.dbs {
			all = append(all, db)
		}
		pgtest.CreateRole(t, app, all...)
		pgtest.CreateRole(t, reshard, all...)
		c.ctl.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "control": "1", "readers": app})
		c.routers = topology.NewStore(c.ctl.As(t, app).Pool)
		c.ctl = c.ctl.As(t, reshard)
		for name, db := range c.dbs {
			db.Exec(t, `ALTER TABLE users OWNER TO `+pgx.Identifier{app}.Sanitize()+`; ALTER TABLE orders OWNER TO `+pgx.Identifier{app}.Sanitize())
			db.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "owners": app})
			admin[name] = db
			c.dbs[name], c.pools[name] = db.As(t, reshard), db.As(t, app).Pool
		}
	})
	for name, db := range c.dbs {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_roles WHERE rolname = current_user AND NOT rolsuper AND rolname = $1`, reshard); n != 1 {
			t.Fatalf("%s: reshard does not connect as the non-superuser %s", name, reshard)
		}
	}
	if n := c.ctl.QueryInt64(t, `SELECT count(*) FROM pg_roles WHERE rolname = current_user AND NOT rolsuper AND rolname = $1`, reshard); n != 1 {
		t.Fatalf("control: reshard does not connect as the non-superuser %s", reshard)
	}
	return c, reshard, admin
}

// refusedPrivileges fails the test on every line of the workers' logs that
// says a statement was refused for want of a privilege, and counts the
// reverse streams started.
func (c *cluster) refusedPrivileges() (reverse int) {
	t := c.t
	for i := 1; i <= c.nWorkers; i++ {
		b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("worker%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, `msg="cdc stream started"`) && strings.Contains(l, "direction=reverse") {
				reverse++
			}
			if strings.Contains(l, "permission denied") || strings.Contains(l, "42501") || strings.Contains(l, "must be owner") || strings.Contains(l, "must be superuser") {
				t.Errorf("worker %d: %s", i, l)
			}
		}
	}
	return reverse
}
