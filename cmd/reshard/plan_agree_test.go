package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/activities"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// TestDryRunIsTheStoredPlan: reshard plan prints the moves the worker's
// PLAN activity stores and runs — the same moves in the same order, the
// same (source, target) pairs in the same order with the same ranges, the
// same ring after and the same estimates — for every kind of migration,
// with a registry weight the planner applies.
func TestDryRunIsTheStoredPlan(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, false)
	// A fourth shard, so that a rebalance gives pairs whose token order is
	// not their name order.
	shard4 := pgtest.NewDB(t, 0)
	shard4.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL)`)
	shard4.Exec(t, `CREATE TABLE orders (user_id bigint NOT NULL, id bigint NOT NULL, amount int, PRIMARY KEY (user_id, id))`)
	c.shards["shard4"] = shard4
	// The byte estimates read each table's size (its forks included): a
	// table whose free-space or visibility map an autovacuum creates
	// between the dry run and the worker's PLAN grows by a page, and in
	// a run under load both of a move's estimates differed by one page's
	// share (1,158 bytes). Vacuumed now, the forks exist before either.
	for _, db := range c.shards {
		db.Exec(t, `VACUUM ANALYZE`)
	}
	var wc devenv.WorkerConfig
	if b, err := os.ReadFile(c.config); err != nil || yaml.Unmarshal(b, &wc) != nil {
		t.Fatalf("read %s: %v", c.config, err)
	}
	wc.Shards["shard4"] = shard4.DSN
	if b, err := yaml.Marshal(wc); err != nil || os.WriteFile(c.config, b, 0o644) != nil {
		t.Fatalf("write %s: %v", c.config, err)
	}
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	c.control.Exec(t, `UPDATE reshard.shards SET weight = 1.5 WHERE name = 'shard2'`)
	ctx := context.Background()
	store := topology.NewStore(c.control.Pool)
	cur, err := store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rg := cur.Ring.Ranges("shard1")[2]

	res := &activities.Resolver{Control: c.control.DSN, Shards: map[string]string{}}
	for name, db := range c.shards {
		res.Shards[name] = db.DSN
	}
	acts := activities.New(res, nil, nil)
	acts.CapacityWALWindow = 200 * time.Millisecond // as c.run gives the dry run
	t.Cleanup(acts.Close)
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts.Plan)

	tables := []string{"--table", "users:id", "--table", "orders:user_id"}
	for i, tc := range []struct {
		kind workflows.Kind
		args []string
		edit func(*migrationFlags)
	}{
		{workflows.KindAddNode, []string{"shard3"}, nil},
		{workflows.KindSplit, []string{"shard2"}, func(f *migrationFlags) { f.Into = "shard3" }},
		{workflows.KindRemoveNode, []string{"shard1"}, nil},
		{workflows.KindMove, nil, func(f *migrationFlags) { f.Range, f.To = fmt.Sprintf("%d:%d", rg.Lo, rg.Hi), "shard2" }},
		{workflows.KindRebalance, nil, func(f *migrationFlags) { f.Add, f.Weights = "shard3,shard4", []string{"shard1=2"} }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			f := defaultMigrationFlags()
			f.Tables = []string{"users:id", "orders:user_id"}
			if tc.edit != nil {
				tc.edit(&f)
			}
			// The dry run, as an operator runs it.
			args := append([]string{"plan", string(tc.kind)}, tc.args...)
			args = append(args, tables...)
			switch tc.kind {
			case workflows.KindSplit:
				args = append(args, "--into", f.Into)
			case workflows.KindMove:
				args = append(args, "--range", f.Range, "--to", f.To)
			case workflows.KindRebalance:
				args = append(args, "--add", f.Add, "--weight", f.Weights[0])
			}
			out, code := c.run(t, append(args, "--json")...)
			var dry planReport
			if code != 0 || json.Unmarshal([]byte(out), &dry) != nil {
				t.Fatalf("reshard %s: exit %d\n%s", strings.Join(args, " "), code, out)
			}

			// The worker's PLAN of the same request, as the CLI builds it.
			f.ID = fmt.Sprintf("agree-%d", i)
			req, err := buildRequest(tc.kind, tc.args, f)
			if err != nil {
				t.Fatal(err)
			}
			if req.Keyspace, req.Tables, _, err = migrationKeyspace(ctx, store, "", req.Tables); err != nil {
				t.Fatal(err)
			}
			val, err := env.ExecuteActivity(acts.Plan, req.WithDefaults())
			if err != nil {
				t.Fatalf("PLAN: %v", err)
			}
			var got workflows.PlanResult
			if err := val.Get(&got); err != nil {
				t.Fatal(err)
			}
			stored, err := store.In(req.Keyspace).LoadPlan(ctx, req.ID)
			if err != nil {
				t.Fatal(err)
			}

			if !reflect.DeepEqual(stored.Moves, dry.Moves) {
				t.Errorf("moves: dry run %v, stored %v", dry.Moves, stored.Moves)
			}
			if a, b := strings.Join(dry.ShardsAfter, ","), strings.Join(stored.After.Shards(), ","); a != b || stored.FromVersion != dry.FromVersion {
				t.Errorf("ring after: dry run %s from v%d, stored %s from v%d", a, dry.FromVersion, b, stored.FromVersion)
			}
			if len(got.Moves) != len(dry.Pairs) {
				t.Fatalf("dry run %d pairs, worker %d moves", len(dry.Pairs), len(got.Moves))
			}
			for j, pr := range dry.Pairs {
				m := got.Moves[j]
				if pr.Source != m.Source || pr.Target != m.Target || !reflect.DeepEqual(pr.Ranges, m.Ranges) || pr.Rows != m.EstRows || pr.Bytes != m.EstBytes {
					t.Errorf("move %d: dry run %s → %s %d ranges, %d rows, %d bytes; worker %s %s → %s %d ranges, %d rows, %d bytes",
						j+1, pr.Source, pr.Target, len(pr.Ranges), pr.Rows, pr.Bytes, m.ID, m.Source, m.Target, len(m.Ranges), m.EstRows, m.EstBytes)
				}
				if a, b := tablesOf(pr.Estimates), tablesOf2(m.EstTables); a != b {
					t.Errorf("move %d: estimates by table: dry run %s, worker %s", j+1, a, b)
				}
				// Both ran the capacity model (plan.Checks): the worker kept
				// a prediction for every move, the dry run printed one.
				if m.Predicted == nil || dry.Capacity == nil || len(dry.Capacity.Moves) != len(got.Moves) {
					t.Errorf("move %d: capacity: worker %+v; dry run %+v", j+1, m.Predicted, dry.Capacity)
				}
			}
			if dry.Problems != 0 || len(dry.CutoverSteps) == 0 {
				t.Errorf("dry run: %d problems, %d cutover steps", dry.Problems, len(dry.CutoverSteps))
			}
			if dry.Moved != got.MovedFraction || dry.Rows != got.EstRows || dry.Bytes != got.EstBytes {
				t.Errorf("dry run moves %.6f, %d rows, %d bytes; worker %.6f, %d rows, %d bytes", dry.Moved, dry.Rows, dry.Bytes, got.MovedFraction, got.EstRows, got.EstBytes)
			}
		})
	}
}

// tablesOf sums a dry run's estimates by table, in the order met.
func tablesOf(es []tableset.Estimate) string {
	var order []string
	sum := map[string][2]int64{}
	for _, e := range es {
		if _, ok := sum[e.Table]; !ok {
			order = append(order, e.Table)
		}
		v := sum[e.Table]
		sum[e.Table] = [2]int64{v[0] + e.Rows, v[1] + e.Bytes}
	}
	var b strings.Builder
	for _, t := range order {
		fmt.Fprintf(&b, "%s:%d/%d ", t, sum[t][0], sum[t][1])
	}
	return b.String()
}

// tablesOf2 is the worker's estimates by table, as tablesOf says them.
func tablesOf2(ts []workflows.TableEstimate) string {
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "%s:%d/%d ", t.Table, t.Rows, t.Bytes)
	}
	return b.String()
}
