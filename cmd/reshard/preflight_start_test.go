package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/api/serviceerror"

	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// A migration verb runs the PLAN checks before it starts anything: a table
// the move cannot take is refused with its fix, exit 2, and no workflow.
func TestAddNodeRefusedByPreflight(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	c.shards["shard3"].Exec(t, `ALTER TABLE users REPLICA IDENTITY NOTHING`)
	out, code := c.run(t, "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--id", "refused-1")
	if code != 2 || !strings.Contains(out, "preflight problem") || !strings.Contains(out, "fix: ") ||
		!strings.Contains(out, "shard3") || !strings.Contains(out, "nothing was started") {
		t.Fatalf("add-node onto a table without replica identity: exit %d\n%s", code, out)
	}
	_, err := c.tc.DescribeWorkflowExecution(context.Background(), workflows.MigrationWorkflowID("refused-1"), "")
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("a workflow was started for the refused add-node: %v", err)
	}
	topo, err := topology.NewStore(c.control.Pool).Current(context.Background())
	if err != nil || topo.Version != 1 {
		t.Fatalf("topology after the refused add-node: v%d %v", topo.Version, err)
	}
	if n := c.slots(t); n != 0 {
		t.Fatalf("%d slots after the refused add-node", n)
	}
}

func TestAuthFailedIsBadInput(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("ping: %w", &pgconn.PgError{Code: "28P01"}), true}, // wrong password
		{&pgconn.PgError{Code: "28000"}, true},                         // no pg_hba entry, unknown role
		{&pgconn.PgError{Code: "57P03"}, false},                        // the server is starting up
		{errors.New("dial tcp: connection refused"), false},
	} {
		if got := authFailed(tc.err); got != tc.want {
			t.Errorf("authFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A new shard has no tables until schema sync gives it them: plan refuses
// it naming that command, and passes once it ran (the README's Quick start
// met "create it there with the same schema as the other shards").
func TestPlanNamesSchemaSync(t *testing.T) {
	c := newTestCluster(t, false)
	for _, s := range []string{"shard1", "shard2"} {
		c.shards[s].Exec(t, `TRUNCATE users, orders`) // rows on shards that do not own them: init refuses them
	}
	if out, code := c.run(t, "init", "--shards", "shard1,shard2", "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	c.shards["shard3"].Exec(t, `DROP TABLE users; DROP TABLE orders`)
	out, code := c.run(t, "plan", "add-node", "shard3")
	if code != 2 || !strings.Contains(out, "table public.users does not exist on shard3") ||
		!strings.Contains(out, "fix: create it there with the same schema as on shard1: reshard schema sync shard3") {
		t.Fatalf("plan add-node onto a shard without the tables: exit %d\n%s", code, out)
	}
	if out, code := c.run(t, "schema", "sync", "shard3"); code != 0 {
		t.Fatalf("schema sync shard3: exit %d\n%s", code, out)
	}
	if out, code := c.run(t, "plan", "add-node", "shard3"); code != 0 || !strings.Contains(out, "preflight passed") {
		t.Fatalf("plan add-node after schema sync: exit %d\n%s", code, out)
	}
}
