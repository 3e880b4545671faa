package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/promtest"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// The second keyspace of the cluster-life scenario: accounts keyed by text,
// with its own ring.
const acctsSchema = `
CREATE TABLE accounts (name text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE entries (account text NOT NULL, id bigint NOT NULL, amount int NOT NULL, PRIMARY KEY (account, id));`

var acctsTables = tableset.Spec{Name: "accts", Tables: []tableset.TableSpec{
	{Schema: "public", Table: "accounts", KeyColumn: "name"}, {Schema: "public", Table: "entries", KeyColumn: "account"},
}}

// life is a cluster living through many migrations: the e2e cluster plus
// shard6, keyspace default (users, orders by bigint id) and keyspace accts
// (accounts, entries by text name), and a writer on each.
type life struct {
	*cluster
	accounts int
	entries  int64
	reg      *prometheus.Registry // the users routers' metrics
	metrics  *router.Metrics

	acctsStop  context.CancelFunc
	acctsWG    sync.WaitGroup
	acctsMu    sync.Mutex
	acctsAcked map[string]int64   // last acknowledged balance per account
	acctsUnk   map[string][]int64 // balances written with an unknown outcome since
	acctsN     int64
	acctsSeq   int64 // the last balance written: balances are never written twice
}

// addShard creates shard i (empty, both schemas) and adds it to the
// worker's configuration.
func (c *cluster) addShard(i int) {
	c.t.Helper()
	db := pgtest.NewDB(c.t, (i-1)%4)
	db.Exec(c.t, schema)
	c.dbs[shard(i)], c.pools[shard(i)] = db, db.Pool
	b, err := os.ReadFile(c.config)
	if err != nil {
		c.t.Fatal(err)
	}
	var wc devenv.WorkerConfig
	if err := yaml.Unmarshal(b, &wc); err != nil {
		c.t.Fatal(err)
	}
	wc.Shards[shard(i)] = db.DSN
	if b, err = yaml.Marshal(wc); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(c.config, b, 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// cli runs the reshard binary against the cluster; it returns the output
// and the exit code.
func (c *cluster) cli(args ...string) (string, int) {
	cmd := exec.Command(bin, append(args, "--config", c.config)...)
	cmd.Env = append(os.Environ(), "RESHARD_PASSWORD=")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		c.t.Fatalf("reshard %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}

func newLife(t *testing.T, users, accounts int) *life {
	c := &life{cluster: newCluster(t, users), accounts: accounts}
	c.addShard(6)
	for _, db := range c.dbs {
		db.Exec(t, acctsSchema)
	}
	// Keyspace default: the e2e cluster's topology v1, its tables
	// registered (every shard checked, then fenced where it owns nothing).
	if out, code := c.cli("keyspace", "add-table", "users:id", "orders:user_id"); code != 0 {
		t.Fatalf("keyspace add-table: exit %d\n%s", code, out)
	}
	// Keyspace accts: a ring of its own over shard1..shard3.
	if out, code := c.cli("init", "--keyspace", "accts", "--shards", "shard1,shard2,shard3", "--table", "accounts:name", "--table", "entries:account"); code != 0 {
		t.Fatalf("init --keyspace accts: exit %d\n%s", code, out)
	}
	accts, err := c.store.In("accts").Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= accounts; i++ {
		name := fmt.Sprintf("acct-%d", i)
		db := c.dbs[accts.Ring.Owner(ring.TokenText(name))]
		db.Exec(t, `INSERT INTO accounts VALUES ($1, 0)`, name)
		db.Exec(t, `INSERT INTO entries SELECT $1, g, g FROM generate_series(1, 3) g`, name)
	}
	c.entries = 3 * int64(accounts)
	c.identities()
	return c
}

// startAcctsWriter updates balances of the first 200 accounts through a
// router of keyspace accts (text keys: the router takes the key type from
// the keyspace registry), remembering each acknowledged balance.
func (c *life) startAcctsWriter() {
	ctx, cancel := context.WithCancel(context.Background())
	r, err := router.New(ctx, c.store.In("accts"), c.pools, router.Options{PollInterval: 200 * time.Millisecond})
	if err != nil {
		c.t.Fatal(err)
	}
	c.acctsStop = cancel
	if c.acctsAcked == nil {
		c.acctsAcked, c.acctsUnk = map[string]int64{}, map[string][]int64{}
		for i := 1; i <= 200; i++ {
			c.acctsAcked[fmt.Sprintf("acct-%d", i)] = 0
		}
	}
	seq0 := c.acctsSeq
	c.acctsWG.Add(2)
	go func() { defer c.acctsWG.Done(); _ = r.Run(ctx) }()
	go func() {
		defer c.acctsWG.Done()
		rnd := rand.New(rand.NewPCG(11, uint64(seq0)))
		for seq := seq0 + 1; ctx.Err() == nil; seq++ {
			c.acctsSeq = seq
			name := fmt.Sprintf("acct-%d", 1+rnd.IntN(200))
			err := r.Do(ctx, name, func(ctx context.Context, p *pgxpool.Pool) error {
				_, err := p.Exec(ctx, `UPDATE accounts SET balance = $2 WHERE name = $1`, name, seq)
				return err
			})
			c.acctsMu.Lock()
			if err == nil {
				c.acctsAcked[name], c.acctsUnk[name] = seq, nil
				c.acctsN++
			} else {
				c.acctsUnk[name] = append(c.acctsUnk[name], seq)
			}
			c.acctsMu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

func (c *life) stopAcctsWriter() {
	c.acctsStop()
	c.acctsWG.Wait()
}

// pending describes the pending activities and workflow tasks of every
// move of st (for a failure message).
func (c *life) pending(st workflows.MigrationState) string {
	var b strings.Builder
	for _, m := range st.Moves {
		id := workflows.MoveWorkflowID(workflows.MigrationWorkflowID(st.Request.ID), m.Spec.ID)
		d, err := c.tc.DescribeWorkflowExecution(context.Background(), id, "")
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", id, err)
			continue
		}
		fmt.Fprintf(&b, "%s: status %s, workflow task %v\n", id, d.GetWorkflowExecutionInfo().GetStatus(), d.GetPendingWorkflowTask())
		for _, a := range d.GetPendingActivities() {
			fmt.Fprintf(&b, "  activity %s state %s attempt %d last worker %s started %v last failure %v\n", a.GetActivityType().GetName(), a.GetState(), a.GetAttempt(),
				a.GetLastWorkerIdentity(), a.GetLastStartedTime().AsTime(), a.GetLastFailure().GetMessage())
		}
	}
	return b.String()
}

// lifeStep is one migration of the scenario.
type lifeStep struct {
	name string
	req  workflows.MigrationRequest
	// kill: the worker is SIGKILLed once a move is in this phase, and a new
	// one started.
	kill workflows.Phase
	// rollbackAt: CUTOVER (the moves wait for approval; rolled back there)
	// or GRACE (rolled back once every move is cut over); "" for none.
	rollbackAt workflows.Phase
	// states are the registry states the step leaves, shard by shard.
	states map[string]topology.ShardState
}

func (c *life) req(id string, kind workflows.Kind, ks string) workflows.MigrationRequest {
	r := c.request(id)
	r.Kind, r.Shard, r.Keyspace = kind, "", ks
	r.Tables = tables
	if ks == "accts" {
		r.Tables = acctsTables
		// Text keys: the CLI's default streams after the copy.
		r.StreamDuringCopy, r.StreamAfterCopy = false, "table public.accounts has a text primary key"
	}
	r.Throttle = workflows.Throttle{RowsPerSec: 100} // copies last long enough to kill the worker in them
	return r
}

// run runs one step under the writers and checks every invariant after it.
func (c *life) run(s lifeStep) {
	t := c.t
	t.Helper()
	start := time.Now()
	acked0, retries0 := c.stats.Acked.Load(), promtest.Counter(t, c.reg, "reshard_router_fence_retries_total", "")
	c.acctsMu.Lock()
	accts0 := c.acctsN
	c.acctsMu.Unlock()
	req := s.req
	if s.rollbackAt == workflows.PhaseCutover {
		req.RequireApproval = true
	}
	if s.rollbackAt == workflows.PhaseGrace {
		req.GracePeriod = new(10 * time.Minute)
	}
	run := c.start(req)
	// Steps copy and verify at 10–100 rows/s so that a worker can be killed
	// in them: 3 minutes ran out at load 35 for a move whose copy and
	// verify took 2m23s and 29s.
	deadline := time.Now().Add(6 * time.Minute)
	killed, asked := s.kill == "", false
	for {
		st, ok := c.state(run.GetID())
		if ok && st.Phase.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			status, _ := c.cli("status", req.ID)
			t.Fatalf("%s: did not end: %s\nreshard status:\n%s\npending:\n%s\n%s", s.name, c.describe(run.GetID()), status, c.pending(st), c.workerLogs())
		}
		if !ok {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if !killed {
			if m, hit := anyIn(st, s.kill); hit {
				c.killWorker()
				c.startWorker()
				killed = true
				t.Logf("%s: worker killed with move %s in %s", s.name, m, s.kill)
			} else if beyond(st, s.kill) {
				t.Fatalf("%s: no move was seen in %s (moves: %s)", s.name, s.kill, phasesNow(st))
			}
		}
		if killed && !asked && s.rollbackAt != "" && len(st.Moves) > 0 {
			ready := allPast(st, workflows.PhaseVerify) // every move waits for approval in CUTOVER
			if s.rollbackAt == workflows.PhaseGrace {
				ready = allPast(st, workflows.PhaseCutover)
			}
			if ready {
				if _, err := c.update(run.GetID(), workflows.UpdateRollback); err != nil {
					t.Fatalf("%s: rollback: %v", s.name, err)
				}
				asked = true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := c.wait(run, time.Minute)
	want := workflows.PhaseDone
	if s.rollbackAt != "" {
		want = workflows.PhaseRolledBack
	}
	if st.Phase != want {
		t.Fatalf("%s: ended %s (%s), want %s\n%s", s.name, st.Phase, st.Error, want, c.describe(run.GetID()))
	}
	if !killed {
		t.Fatalf("%s: the worker was never killed", s.name)
	}
	var pause time.Duration
	for _, m := range st.Moves {
		pause += m.WritePause
	}
	// The writers pause for the check: a write acknowledged between the
	// check's read and its comparison would look lost.
	acked := c.stats.Acked.Load() - acked0
	c.stopWriters()
	c.stopAcctsWriter()
	c.check(s)
	c.acctsMu.Lock()
	accts := c.acctsN - accts0
	c.acctsMu.Unlock()
	c.startWritersWith(c.metrics)
	c.startAcctsWriter()
	t.Logf("step %-40s %s in %5s: %d moves, users writes acknowledged %d, accounts writes acknowledged %d, fence refusals retried %.0f, write pause %s (sum over moves)",
		s.name, st.Phase, time.Since(start).Round(time.Second), len(st.Moves), acked, accts,
		promtest.Counter(t, c.reg, "reshard_router_fence_retries_total", "")-retries0, pause.Round(time.Millisecond))
}

// check: after a step (the writers paused), every invariant of the cluster
// holds.
func (c *life) check(s lifeStep) {
	t := c.t
	t.Helper()
	ctx := context.Background()
	// Every row of every registered table on its owner and nowhere else.
	for _, ks := range []struct {
		name   string
		tables map[string]string // table -> token expression
	}{
		{topology.DefaultKeyspace, map[string]string{"users": "hashint8extended(id, 0)", "orders": "hashint8extended(user_id, 0)"}},
		{"accts", map[string]string{"accounts": "hashtextextended(name, 0)", "entries": "hashtextextended(account, 0)"}},
	} {
		cur, err := c.store.In(ks.name).Current(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cur.Migrating()) != 0 {
			t.Fatalf("%s: keyspace %s has %d ranges migrating after the migration ended", s.name, ks.name, len(cur.Migrating()))
		}
		for name, db := range c.dbs {
			for tbl, tok := range ks.tables {
				where := "true"
				if cur.Ring.HasShard(name) {
					where = "NOT (" + ring.Predicate(tok, cur.Ring.Ranges(name)) + ")"
				}
				if n := db.QueryInt64(t, `SELECT count(*) FROM `+tbl+` WHERE `+where); n != 0 {
					t.Fatalf("%s: %d rows of %s on %s, which does not own them in keyspace %s v%d", s.name, n, tbl, name, ks.name, cur.Version)
				}
			}
		}
	}
	var orders, entries, accounts, users int64
	for _, db := range c.dbs {
		orders += db.QueryInt64(t, `SELECT count(*) FROM orders`)
		entries += db.QueryInt64(t, `SELECT count(*) FROM entries`)
		accounts += db.QueryInt64(t, `SELECT count(*) FROM accounts`)
		users += db.QueryInt64(t, `SELECT count(*) FROM users WHERE id > 400 AND id < 1000000`)
	}
	if orders != c.orders || entries != c.entries || accounts != int64(c.accounts) || users != int64(c.users-400) {
		t.Fatalf("%s: rows lost or duplicated: orders %d (want %d), entries %d (want %d), accounts %d (want %d), untouched users %d (want %d)",
			s.name, orders, c.orders, entries, c.entries, accounts, c.accounts, users, c.users-400)
	}
	// Every acknowledged write of the users writers is on its owner (the
	// placement check above says it is nowhere else).
	def, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mm, err := c.ledger.Check(ctx, usersTable, c.pools, def.Ring.OwnerInt64)
	if err != nil {
		t.Fatal(err)
	}
	if len(mm) > 0 {
		t.Fatalf("%s: %d acknowledged writes lost or wrong, first %v", s.name, len(mm), mm[0])
	}
	// And of the accounts writer: read each account on its owner now.
	accts, err := c.store.In("accts").Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.acctsMu.Lock()
	for name, acked := range c.acctsAcked {
		var got int64
		if err := c.pools[accts.Ring.Owner(ring.TokenText(name))].QueryRow(ctx, `SELECT balance FROM accounts WHERE name = $1`, name).Scan(&got); err != nil {
			c.acctsMu.Unlock()
			t.Fatalf("%s: account %s on its owner: %v", s.name, name, err)
		}
		if got != acked && !slices.Contains(c.acctsUnk[name], got) {
			c.acctsMu.Unlock()
			t.Fatalf("%s: account %s has balance %d, its acknowledged one is %d (outcome unknown: %v)", s.name, name, got, acked, c.acctsUnk[name])
		}
	}
	c.acctsMu.Unlock()
	// Every shard's fences and guards are what the topology wants, and no
	// row is misplaced: reshard topology check agrees.
	if out, code := c.cli("topology", "check"); code != 0 {
		t.Fatalf("%s: reshard topology check: exit %d\n%s", s.name, code, out)
	}
	// Nothing of an ended move is left.
	for name, db := range c.dbs {
		for what, q := range map[string]string{
			"slots":        `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`,
			"publications": `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'reshard%'`,
		} {
			if n := db.QueryInt64(t, q); n != 0 {
				t.Fatalf("%s: %d %s left on %s", s.name, n, what, name)
			}
		}
		// A stream started after its move's cleanup (an activity the
		// server timed out, still starting on a loaded worker) found its
		// origin dropped and created it again: it now drops what it
		// created when its slot is gone (cdc, slotExists).
		var origins []string
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(roname ORDER BY roname), '{}') FROM pg_replication_origin WHERE roname LIKE 'reshard%'`).Scan(&origins); err != nil {
			t.Fatal(err)
		}
		if len(origins) > 0 {
			t.Fatalf("%s: replication origins left on %s: %v", s.name, name, origins)
		}
	}
	if n := c.ctl.QueryInt64(t, `SELECT count(*) FROM reshard.fence_hold`); n != 0 {
		t.Fatalf("%s: %d fence holds left", s.name, n)
	}
	// No insert through a router collides on an identity column.
	c.checkSequences(s.name)
	// Shard states.
	for name, want := range s.states {
		sh, err := c.store.Shard(ctx, name)
		if err != nil || sh.State != want {
			t.Fatalf("%s: shard %s is %s (%v), want %s", s.name, name, sh.State, err, want)
		}
	}
}

// formerRangeOf is a vnode range shard owns now that from owned in the
// first ring: a move back to a former owner.
func (c *life) formerRangeOf(owner, from string) ring.Range {
	c.t.Helper()
	cur, err := c.store.Current(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, or := range cur.Ring.AllRanges() {
		if or.Shard == owner && c.ring.Owner(or.Range.Hi) == from && c.ring.Owner(or.Range.Lo+1) == from {
			return or.Range
		}
	}
	c.t.Fatalf("no range of %s that %s owned before", owner, from)
	return ring.Range{}
}

// clusterLife runs the cluster-life scenario: steps picks which.
func clusterLife(t *testing.T, users, accounts int, long bool) {
	wall(t)
	c := newLife(t, users, accounts)
	c.reg = prometheus.NewRegistry()
	c.metrics = router.NewMetrics(c.reg)
	c.startWorker()
	c.startWritersWith(c.metrics)
	c.startAcctsWriter()
	active := topology.ShardActive
	// Rows with ids from the identities on their first owners, before any
	// move: the ids the moves carry.
	c.checkSequences("before the first migration")

	c.run(lifeStep{name: "add-node shard5", req: func() workflows.MigrationRequest {
		r := c.req("life-add5", workflows.KindAddNode, "")
		r.Shard = shard(5)
		return r
	}(), kill: workflows.PhaseSnapshotCopy, states: map[string]topology.ShardState{shard(5): active}})

	if long {
		c.run(lifeStep{name: "split shard2 into shard6 (keyspace accts)", req: func() workflows.MigrationRequest {
			r := c.req("life-split", workflows.KindSplit, "accts")
			r.Shard, r.Into = shard(2), shard(6)
			return r
		}(), kill: workflows.PhaseSnapshotCopy, states: map[string]topology.ShardState{shard(6): active, shard(2): active}})
	}

	c.run(lifeStep{name: "remove-node shard5, rolled back at CUTOVER", req: func() workflows.MigrationRequest {
		r := c.req("life-rm5-rb", workflows.KindRemoveNode, "")
		r.Shard = shard(5)
		return r
	}(), kill: workflows.PhaseCutover, rollbackAt: workflows.PhaseCutover, states: map[string]topology.ShardState{shard(5): active}})

	c.run(lifeStep{name: "move a range back to its former owner", req: func() workflows.MigrationRequest {
		r := c.req("life-back", workflows.KindMove, "")
		rg := c.formerRangeOf(shard(5), shard(1))
		r.Range, r.To = &rg, shard(1)
		r.Throttle.RowsPerSec = 10 // one vnode range: a few dozen rows
		return r
	}(), kill: workflows.PhaseSnapshotCopy, states: map[string]topology.ShardState{shard(5): active, shard(1): active}})

	if long {
		c.run(lifeStep{name: "remove-node shard5", req: func() workflows.MigrationRequest {
			r := c.req("life-rm5", workflows.KindRemoveNode, "")
			r.Shard = shard(5)
			return r
		}(), kill: workflows.PhaseSnapshotCopy, states: map[string]topology.ShardState{shard(5): topology.ShardRemoved}})

		c.run(lifeStep{name: "add-node shard5, rolled back in GRACE", req: func() workflows.MigrationRequest {
			r := c.req("life-add5-rb", workflows.KindAddNode, "")
			r.Shard = shard(5)
			return r
		}(), kill: workflows.PhaseGrace, rollbackAt: workflows.PhaseGrace, states: map[string]topology.ShardState{shard(5): topology.ShardRemoved}})

		c.run(lifeStep{name: "add-node shard5 again", req: func() workflows.MigrationRequest {
			r := c.req("life-add5-again", workflows.KindAddNode, "")
			r.Shard = shard(5)
			return r
		}(), kill: workflows.PhaseSnapshotCopy, states: map[string]topology.ShardState{shard(5): active}})
	}
	// The writers started again after the last check write on the final
	// topology: give them the time to (they must succeed there too).
	for deadline := time.Now().Add(20 * time.Second); c.stats.Acked.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	c.stopWriters()
	c.stopAcctsWriter()
	if c.stats.Failed.Load() != 0 {
		t.Errorf("%d user writes failed (last: %v)", c.stats.Failed.Load(), *c.stats.LastErr.Load())
	}
	if c.acctsN == 0 {
		t.Error("the accounts writer acknowledged nothing")
	}
	c.check(lifeStep{name: "end"})
}
