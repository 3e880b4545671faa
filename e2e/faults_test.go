//go:build e2e

package e2e

// The fault-injection suite: the failure list of a resharding under live
// writes (a worker crash at ~37% of the copy, CDC falling behind, a checksum
// mismatch, the target down before cutover, the source restarted during
// GRACE, a topology publish racing another publisher, TRUNCATE and DDL
// mid-move). Each scenario runs add-node with writers going through the
// router and ends with the ledger check (no acknowledged write lost) and the
// row-for-row placement check. Run with make e2e.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// doneState: the migration and its four moves ended DONE, each copied,
// verified and cut over with a measured write pause, ≈1/5 of the space
// moved from every old shard to shard5.
func doneState(t *testing.T, st workflows.MigrationState) {
	t.Helper()
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("migration ended %s: %s", st.Phase, st.Error)
	}
	if st.MovedFraction < 0.17 || st.MovedFraction > 0.23 {
		t.Fatalf("moved fraction %.3f, want ≈0.20", st.MovedFraction)
	}
	var sources []string
	for _, m := range st.Moves {
		if m.Phase != workflows.PhaseDone || !m.CopyDone || m.Verify == nil || !m.Verify.Passed || m.WritePause <= 0 || m.Spec.Target != shard(5) {
			t.Fatalf("move %s: %+v", m.Spec.ID, m)
		}
		sources = append(sources, m.Spec.Source)
	}
	slices.Sort(sources)
	if strings.Join(sources, ",") != "shard1,shard2,shard3,shard4" {
		t.Fatalf("moves from %v, want one from each old shard", sources)
	}
}

// moveState asks a Move child for its own state: it changes on every copy
// slice, where the parent hears of copy progress only every ~10 s.
func (c *cluster) moveState(migrationID, moveID string) (workflows.MoveState, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var st workflows.MoveState
	v, err := c.tc.QueryWorkflow(ctx, workflows.MigrationWorkflowID(migrationID)+"/"+moveID, "", workflows.QueryState)
	if err != nil || v.Get(&st) != nil {
		return st, false
	}
	return st, true
}

// planned waits until the migration has its moves.
func (c *cluster) planned(run client.WorkflowRun, deadline time.Time) workflows.MigrationState {
	c.t.Helper()
	for {
		if st, ok := c.state(run.GetID()); ok && len(st.Moves) == 4 {
			return st
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no plan: %s\n%s", c.describe(run.GetID()), c.workerLogs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rowsIn counts the users and orders of a shard whose keys fall in ranges.
func (c *cluster) rowsIn(name string, rs []ring.Range) int64 {
	db := c.dbs[name]
	return db.QueryInt64(c.t, `SELECT count(*) FROM users WHERE `+ring.Predicate("hashint8extended(id, 0)", rs)) +
		db.QueryInt64(c.t, `SELECT count(*) FROM orders WHERE `+ring.Predicate("hashint8extended(user_id, 0)", rs))
}

// copyTotals: the users and orders each planned move copies (its ranges'
// rows on its source).
func (c *cluster) copyTotals(st workflows.MigrationState) map[string]int64 {
	total := map[string]int64{}
	for _, m := range st.Moves {
		total[m.Spec.ID] = c.rowsIn(m.Spec.Source, m.Spec.Ranges)
	}
	return total
}

// copyingAt polls the moves of st (their own state, which changes on every
// copy slice) until one is in SNAPSHOT_COPY with a fraction of its rows
// (total, copyTotals') copied in [lo, hi] and ok (nil: any); it returns
// that move and the fraction. The test fails at the deadline, or at once
// when every move went past hi while none was seen in the window.
func (c *cluster) copyingAt(run client.WorkflowRun, st workflows.MigrationState, total map[string]int64, lo, hi float64, deadline time.Time, ok func(workflows.MoveState) bool) (workflows.MoveState, float64) {
	c.t.Helper()
	id := st.Request.ID
	lastLog := time.Now()
	for {
		for _, m := range st.Moves {
			ms, found := c.moveState(id, m.Spec.ID)
			if !found || ms.Phase != workflows.PhaseSnapshotCopy || total[m.Spec.ID] == 0 {
				continue
			}
			f := float64(ms.RowsCopied) / float64(total[m.Spec.ID])
			if f >= lo && f <= hi && (ok == nil || ok(ms)) {
				return ms, f
			}
			if f > hi && !slices.ContainsFunc(st.Moves, func(o workflows.MoveState) bool {
				s, _ := c.moveState(id, o.Spec.ID)
				return s.RowsCopied < int64(lo*float64(total[o.Spec.ID]))
			}) {
				c.t.Fatalf("every move went past %.0f%% of its copy between two polls (move %s at %.0f%%)", 100*hi, m.Spec.ID, 100*f)
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no move seen at %.0f–%.0f%% of its copy: %s\n%s", 100*lo, 100*hi, c.describe(run.GetID()), c.workerLogs())
		}
		if time.Since(lastLog) > 5*time.Second {
			lastLog = time.Now()
			var p []string
			for _, m := range st.Moves {
				ms, _ := c.moveState(id, m.Spec.ID)
				p = append(p, fmt.Sprintf("%s %s %d/%d", m.Spec.ID, ms.Phase, ms.RowsCopied, total[m.Spec.ID]))
			}
			c.t.Logf("copy: %s", strings.Join(p, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endsDone waits for run to end, stops the writers, and checks that it
// ended DONE (doneState) with every acknowledged write on its owner, once
// (checkData).
func (c *cluster) endsDone(run client.WorkflowRun, timeout time.Duration) workflows.MigrationState {
	c.t.Helper()
	st := c.wait(run, timeout)
	c.stopWriters()
	c.t.Logf("moves: %s", summary(st))
	doneState(c.t, st)
	c.checkData(st)
	return st
}

// durable makes the server of a shard commit synchronously (test servers
// run with synchronous_commit = off, and an immediate shutdown would then
// lose commits PostgreSQL had acknowledged: the ledger would rightly call
// them lost). Call it before the writers start; undone at the end.
func (c *cluster) durable(name string) {
	c.t.Helper()
	c.durableDB(c.dbs[name])
}

// durableDB is durable for any database's server.
func (c *cluster) durableDB(db *pgtest.DB) {
	c.t.Helper()
	db.Exec(c.t, `ALTER SYSTEM SET synchronous_commit = on`)
	db.Exec(c.t, `SELECT pg_reload_conf()`)
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = db.Pool.Exec(ctx, `ALTER SYSTEM RESET synchronous_commit`)
		_, _ = db.Pool.Exec(ctx, `SELECT pg_reload_conf()`)
	})
}

// crashServer crashes a PostgreSQL server (immediate shutdown) and starts
// it again after down; the server is back even if the test fails meanwhile.
func (c *cluster) crashServer(name string) (restart func()) {
	c.t.Helper()
	return c.crashServerOf(name, c.dbs[name])
}

// crashServerOf is crashServer for the server of any database (the control
// database's, say).
func (c *cluster) crashServerOf(name string, db *pgtest.DB) (restart func()) {
	c.t.Helper()
	pg := pgtest.PG(c.t)
	s := *db.Server
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Kill(ctx, s); err != nil {
		c.t.Fatalf("crash %s: %v", name, err)
	}
	c.t.Logf("server of %s crashed (port %d)", name, s.Port)
	started := false
	restart = func() {
		if started {
			return
		}
		started = true
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pg.Start(ctx, s); err != nil {
			c.t.Fatalf("restart %s: %v", name, err)
		}
		c.t.Logf("server of %s started again", name)
	}
	c.t.Cleanup(restart)
	return restart
}

// checkRolledBack: the migration ended ROLLED_BACK, the ring is exactly the
// one before it, shard5 holds no row, every acknowledged write is on its old
// owner, no slot or publication is left.
func (c *cluster) checkRolledBack(st workflows.MigrationState) {
	t := c.t
	t.Helper()
	if st.Phase != workflows.PhaseRolledBack {
		t.Fatalf("migration ended %s: %s", st.Phase, st.Error)
	}
	ctx := context.Background()
	cur, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Migrating()) != 0 || !slices.Equal(cur.Ring.VNodes(), c.ring.VNodes()) {
		t.Fatalf("topology v%d after the rollback: %d ranges migrating, ring equal to the old one: %v", cur.Version, len(cur.Migrating()), slices.Equal(cur.Ring.VNodes(), c.ring.VNodes()))
	}
	if n := c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM users`) + c.dbs[shard(5)].QueryInt64(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("%d rows left on shard5 after the rollback", n)
	}
	mm, err := c.ledger.Check(ctx, usersTable, c.pools, c.ring.OwnerInt64)
	if err != nil || len(mm) > 0 {
		t.Fatalf("ledger after the rollback: %v %v", err, mm)
	}
	var orders int64
	for name, db := range c.dbs {
		orders += db.QueryInt64(t, `SELECT count(*) FROM orders`)
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'reshard%'`); n != 0 {
			t.Fatalf("%d reshard slots left on %s", n, name)
		}
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'reshard%'`); n != 0 {
			t.Fatalf("%d reshard publications left on %s", n, name)
		}
	}
	if orders != c.orders {
		t.Fatalf("%d orders after the rollback, %d before", orders, c.orders)
	}
}

// sourceDigest is, per old shard, a digest of every row the writers never
// touch (users above the ledger's keys, all orders): a rollback must leave
// them exactly as they were.
func (c *cluster) sourceDigest() map[string]string {
	d := map[string]string{}
	for i := 1; i <= 4; i++ {
		var s string
		if err := c.dbs[shard(i)].Pool.QueryRow(context.Background(), `SELECT
			(SELECT coalesce(md5(string_agg(u::text, ',' ORDER BY id)), '') FROM users u WHERE id > 400 AND id < 1000000) ||
			(SELECT coalesce(md5(string_agg(o::text, ',' ORDER BY user_id, id)), '') FROM orders o)`).Scan(&s); err != nil {
			c.t.Fatal(err)
		}
		d[shard(i)] = s
	}
	return d
}

// TestFaultWorkerCrashAt37PercentOfCopy kills the worker (SIGKILL) when a
// move has copied 35–40% of its rows, and starts a new one: the copy resumes
// from its checkpoint and the migration ends DONE with the data correct.
func TestFaultWorkerCrashAt37PercentOfCopy(t *testing.T) {
	wall(t)
	c := newCluster(t, 40_000)
	c.startWorker()
	c.startWriters()
	req := c.request("f_copy37")
	// ~5,000 rows per move at 100 rows/s in chunks of 50, a slice every
	// 2 s: progress moves by at most ~4% per slice, so 35–40% is seen.
	req.Throttle = workflows.Throttle{RowsPerSec: 100}
	req.ChunkRows = 50
	run := c.start(req)
	deadline := time.Now().Add(5 * time.Minute)
	st := c.planned(run, deadline)
	total := c.copyTotals(st)
	ms, frac := c.copyingAt(run, st, total, 0.35, 0.40, deadline, nil)
	victim := ms.Spec
	c.killWorker()
	onTarget := c.rowsIn(shard(5), victim.Ranges)
	t.Logf("worker killed with move %s at %.1f%% of its copy (state); %d of %d rows on shard5", victim.ID, 100*frac, onTarget, total[victim.ID])
	if f := float64(onTarget) / float64(total[victim.ID]); f < 0.30 || f > 0.50 {
		t.Errorf("shard5 holds %.0f%% of move %s's rows at the kill", 100*f, victim.ID)
	}
	c.startWorker()
	// The copy resumes where it was: no move starts over from zero.
	time.Sleep(3 * time.Second)
	if ms, ok := c.moveState(req.ID, victim.ID); ok && ms.Phase == workflows.PhaseSnapshotCopy && ms.RowsCopied < onTarget/2 {
		t.Errorf("move %s restarted its copy: %d rows copied after the restart, %d were on the target", victim.ID, ms.RowsCopied, onTarget)
	}
	st = c.endsDone(run, time.Until(deadline)+time.Minute)
}

// TestFaultCDCFallsBehind stops the worker while the moves copy and writes
// a burst on every source: when a new worker comes, the streams start far
// behind (lag above the cutover gate), catch up below it, and the
// migration cuts over and ends DONE.
func TestFaultCDCFallsBehind(t *testing.T) {
	wall(t)
	c := newCluster(t, 20_000)
	c.startWorker()
	c.startWriters()
	req := c.request("f_lag")
	req.Throttle = workflows.Throttle{RowsPerSec: 1000}
	req.MaxLagBytes = 1 << 20
	run := c.start(req)
	deadline := time.Now().Add(5 * time.Minute)
	c.waitFor(run, deadline, "every move copying", func(st workflows.MigrationState) bool {
		return len(st.Moves) == 4 && allPast(st, workflows.PhaseJoining)
	})
	c.killWorker()
	// The burst: every user the writers do not touch, updated 20 times on
	// every source (a fifth of it in the moving ranges).
	burst := time.Now()
	var wal int64
	for i := 1; i <= 4; i++ {
		db := c.dbs[shard(i)]
		before := db.QueryInt64(t, `SELECT pg_current_wal_lsn() - '0/0'`)
		for range 20 {
			db.Exec(t, `UPDATE users SET balance = balance + 1 WHERE id > 400 AND id < 1000000`)
		}
		wal += db.QueryInt64(t, `SELECT pg_current_wal_lsn() - '0/0'`) - before
	}
	t.Logf("burst: %d MB of WAL on the sources in %s with no worker", wal>>20, time.Since(burst).Round(time.Millisecond))
	c.startWorker()
	var peak atomic.Int64
	var sawHigh, sawLow bool
	var st workflows.MigrationState
	for {
		var ok bool
		st, ok = c.state(run.GetID())
		if ok {
			for _, m := range st.Moves {
				ms, ok := c.moveState(req.ID, m.Spec.ID)
				if !ok {
					continue
				}
				if ms.LagBytes > peak.Load() {
					peak.Store(ms.LagBytes)
				}
				if ms.Phase == workflows.PhaseCDCCatchUp && ms.LagBytes > req.MaxLagBytes {
					sawHigh = true
				}
				if sawHigh && order(ms.Phase) > order(workflows.PhaseCDCCatchUp) {
					sawLow = true
				}
			}
			if st.Phase.Terminal() || (sawHigh && sawLow) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag: high %v, then below the gate %v: %s", sawHigh, sawLow, c.describe(run.GetID()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("CDC lag peak seen %d KB (gate %d KB); above the gate in CDC_CATCH_UP: %v, then past it: %v", peak.Load()>>10, req.MaxLagBytes>>10, sawHigh, sawLow)
	if !sawHigh || !sawLow {
		t.Errorf("the lag was not seen above the gate (%v) and then past it (%v)", sawHigh, sawLow)
	}
	st = c.endsDone(run, time.Until(deadline)+time.Minute)
	// The burst itself arrived: every moved user has its 20 increments.
	for i := 1; i <= 5; i++ {
		if n := c.dbs[shard(i)].QueryInt64(t, `SELECT count(*) FROM users WHERE id > 400 AND id < 1000000 AND balance <> 20`); n != 0 {
			t.Fatalf("%d users on %s without the burst's 20 increments", n, shard(i))
		}
	}
}

// TestFaultChecksumMismatch changes a copied row on the target (replica
// role, so the fence lets it through) while the copy runs: verify must
// report the row as different, by key; rollback then restores the ring and
// leaves the sources exactly as they were and the target empty.
func TestFaultChecksumMismatch(t *testing.T) {
	wall(t)
	c := newCluster(t, 5_000)
	digest := c.sourceDigest()
	c.startWorker()
	c.startWriters()
	req := c.request("f_mismatch")
	req.Throttle = workflows.Throttle{RowsPerSec: 200}
	req.ChunkRows = 20
	run := c.start(req)
	deadline := time.Now().Add(4 * time.Minute)
	st := c.planned(run, deadline)
	// The first users (by id) of each move that the writers never touch.
	victims := map[string]int64{}
	for _, m := range st.Moves {
		k := int64(401)
		for !ring.ContainsAny(m.Spec.Ranges, ring.TokenInt64(k)) {
			k++
		}
		victims[m.Spec.ID] = k
	}
	conn := c.dbs[shard(5)].Conn(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	for len(victims) > 0 {
		for id, k := range victims {
			tag, err := conn.Exec(ctx, `UPDATE users SET name = 'tampered' WHERE id = $1`, k)
			if err != nil {
				t.Fatal(err)
			}
			if tag.RowsAffected() == 1 {
				ms, _ := c.moveState(req.ID, id)
				t.Logf("user %d of move %s changed on shard5 (move in %s, %d rows copied)", k, id, ms.Phase, ms.RowsCopied)
				delete(victims, id)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows never copied: %v", victims)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st = c.waitFor(run, deadline, "every move to fail verify", func(st workflows.MigrationState) bool {
		n := 0
		for _, m := range st.Moves {
			if m.Phase == workflows.PhaseVerify && m.Verify != nil && !m.Verify.Passed {
				n++
			}
		}
		return n == 4
	})
	for _, m := range st.Moves {
		t.Logf("move %s verify: %d mismatches, samples %v", m.Spec.ID, m.Verify.Mismatches, m.Verify.Samples)
		if m.Verify.Mismatches != 1 || len(m.Verify.Samples) != 1 || !strings.Contains(m.Verify.Samples[0], "different") ||
			!strings.Contains(m.Verify.Samples[0], "users") || !strings.Contains(m.Verify.Samples[0], fmt.Sprint(victimKey(m.Spec.Ranges))) {
			t.Errorf("move %s verify: %+v, want one different users row %d", m.Spec.ID, m.Verify, victimKey(m.Spec.Ranges))
		}
	}
	msg, err := c.update(run.GetID(), workflows.UpdateRollback)
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	t.Logf("rollback: %s", msg)
	st = c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	c.checkRolledBack(st)
	after := c.sourceDigest()
	for name, d := range digest {
		if after[name] != d {
			t.Errorf("rows of %s the writers never touched changed across the migration and its rollback", name)
		}
	}
}

func victimKey(rs []ring.Range) int64 {
	k := int64(401)
	for !ring.ContainsAny(rs, ring.TokenInt64(k)) {
		k++
	}
	return k
}

// TestFaultTargetDownBeforeCutover stops the target shard while every move
// waits for cutover approval, then approves: the moves must not cut over to
// a dead shard, must say why in their state, and must finish DONE once the
// server is back.
func TestFaultTargetDownBeforeCutover(t *testing.T) {
	wall(t)
	c := newCluster(t, 5_000)
	c.durable(shard(5))
	c.startWorker()
	c.startWriters()
	req := c.request("f_target_down")
	req.RequireApproval = true
	run := c.start(req)
	deadline := time.Now().Add(5 * time.Minute)
	c.waitFor(run, deadline, "every move waiting for approval", func(st workflows.MigrationState) bool {
		return allPast(st, workflows.PhaseVerify)
	})
	restart := c.crashServer(shard(5))
	c.approve(run.GetID())
	// The moves retry, without cutting over, and say what is wrong.
	down := time.Now()
	var errs []string
	for time.Since(down) < 20*time.Second {
		st, ok := c.state(run.GetID())
		if ok {
			if st.Phase.Terminal() {
				t.Fatalf("migration ended %s with its target down: %s", st.Phase, c.describe(run.GetID()))
			}
			for _, m := range st.Moves {
				if order(m.Phase) > order(workflows.PhaseCutover) {
					t.Fatalf("move %s reached %s with its target down", m.Spec.ID, m.Phase)
				}
				if ms, ok := c.moveState(req.ID, m.Spec.ID); ok && ms.Error != "" && !slices.Contains(errs, ms.Error) {
					errs = append(errs, ms.Error)
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cur.Ring.HasShard(shard(5)) && len(cur.Ring.Ranges(shard(5))) > 0 && cur.State(cur.Ring.Ranges(shard(5))[0].Hi).Owner == shard(5) {
		t.Errorf("topology v%d serves ranges from the dead shard5", cur.Version)
	}
	pending := c.pendingFailures(req.ID)
	t.Logf("with shard5 down for %s: errors in the moves' state %q; last failures of pending activities %q", time.Since(down).Round(time.Second), errs, pending)
	if len(errs) == 0 && len(pending) == 0 {
		t.Errorf("no move says that its target is unreachable")
	}
	for _, e := range append(errs, pending...) {
		if !strings.Contains(e, "connect") && !strings.Contains(e, "shard5") && !strings.Contains(e, "refused") {
			t.Errorf("unclear error with the target down: %s", e)
		}
	}
	restart()
	c.endsDone(run, time.Until(deadline)+2*time.Minute)
}

// pendingFailures are the last failures of the moves' pending activities.
func (c *cluster) pendingFailures(migrationID string) []string {
	st, _ := c.state(workflows.MigrationWorkflowID(migrationID))
	var out []string
	for _, m := range st.Moves {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := c.tc.DescribeWorkflowExecution(ctx, workflows.MigrationWorkflowID(migrationID)+"/"+m.Spec.ID, "")
		cancel()
		if err != nil {
			continue
		}
		for _, pa := range d.GetPendingActivities() {
			if f := pa.GetLastFailure(); f != nil && !slices.Contains(out, f.GetMessage()) {
				out = append(out, f.GetMessage())
			}
		}
	}
	return out
}

// TestFaultSourceRestartedInGrace crashes and restarts a source shard while
// its move is in GRACE: reverse CDC must reconnect (a write on the new
// owner reaches the old one again), then complete ends the migration DONE.
func TestFaultSourceRestartedInGrace(t *testing.T) {
	wall(t)
	c := newCluster(t, 5_000)
	c.durable(shard(2))
	c.startWorker()
	c.startWriters()
	req := c.request("f_grace")
	req.GracePeriod = new(10 * time.Minute)
	run := c.start(req)
	deadline := time.Now().Add(5 * time.Minute)
	st := c.waitFor(run, deadline, "every move in GRACE", func(st workflows.MigrationState) bool {
		return allPast(st, workflows.PhaseCutover)
	})
	var mv workflows.MoveSpec
	for _, m := range st.Moves {
		if m.Spec.Source == shard(2) {
			mv = m.Spec
		}
	}
	probe := func(k int64, name string) {
		t.Helper()
		c.dbs[shard(5)].Exec(t, `INSERT INTO users VALUES ($1, $2, 0)`, k, name)
		for start := time.Now(); ; {
			if c.dbs[shard(2)].QueryInt64(t, `SELECT count(*) FROM users WHERE id = $1 AND name = $2`, k, name) == 1 {
				t.Logf("%s: user %d written on shard5 reached shard2 by reverse CDC in %s", name, k, time.Since(start).Round(time.Millisecond))
				return
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("%s: user %d written on shard5 never reached shard2: %s\n%s", name, k, c.describe(run.GetID()), c.workerLogs())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	key := func(from int64) int64 {
		for !ring.ContainsAny(mv.Ranges, ring.TokenInt64(from)) {
			from++
		}
		return from
	}
	k1 := key(5_000_001)
	probe(k1, "before-restart")
	restart := c.crashServer(shard(2))
	time.Sleep(3 * time.Second)
	restart()
	k2 := key(k1 + 1)
	probe(k2, "after-restart")
	st, _ = c.state(run.GetID())
	for _, m := range st.Moves {
		if m.Phase != workflows.PhaseGrace {
			t.Fatalf("move %s in %s after the restart, want GRACE", m.Spec.ID, m.Phase)
		}
	}
	msg, err := c.update(run.GetID(), workflows.UpdateComplete)
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	t.Logf("complete: %s", msg)
	st = c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	t.Logf("moves: %s; writers: %d failed while shard2 was down", summary(st), c.stats.Failed.Load())
	doneState(t, st)
	c.checkData(st)
	for _, k := range []int64{k1, k2} {
		if n := c.dbs[shard(2)].QueryInt64(t, `SELECT count(*) FROM users WHERE id = $1`, k); n != 0 {
			t.Errorf("user %d still on shard2 after cleanup", k)
		}
	}
}

// TestFaultCompetingPublisher publishes the current topology again, as
// another publisher would, without pause while the migration's moves run:
// every publish of the migration meets compare-and-set conflicts, must
// re-read and re-apply its change, and the final ring must give every
// range to its old owner or the new shard, none lost, none twice.
func TestFaultCompetingPublisher(t *testing.T) {
	wall(t)
	c := newCluster(t, 5_000)
	c.startWorker()
	c.startWriters()
	// From the migrating topology on (a version bump between the plan and
	// it makes the migration refuse to start: "plan the migration again").
	run := c.start(c.request("f_publish"))
	c.waitFor(run, time.Now().Add(2*time.Minute), "every move copying", func(st workflows.MigrationState) bool {
		return len(st.Moves) == 4 && allPast(st, workflows.PhaseJoining)
	})
	ctx, cancel := context.WithCancel(context.Background())
	var bumps, conflicts atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cur, err := c.store.Current(ctx)
			if err != nil {
				continue
			}
			next, err := topology.New(cur.Ring, cur.Migrating(), "competing publisher")
			if err != nil {
				continue
			}
			// A slow publisher: 30 ms between its read and its write, so
			// that the migration's publishes land in between.
			time.Sleep(30 * time.Millisecond)
			if _, err := c.store.Publish(ctx, cur.Version, next.WithMigrationID(cur.MigrationID)); err == nil {
				bumps.Add(1)
			} else {
				conflicts.Add(1)
			}
		}
	}()
	defer func() { cancel(); <-done }()
	st := c.wait(run, 4*time.Minute)
	cancel()
	<-done
	c.stopWriters()
	t.Logf("competing publisher: %d versions published, %d of its publishes lost a compare-and-set; moves: %s", bumps.Load(), conflicts.Load(), summary(st))
	if bumps.Load() < 10 {
		t.Fatalf("the competing publisher published only %d versions", bumps.Load())
	}
	if conflicts.Load() == 0 {
		t.Errorf("the competing publisher never lost a race: the migration's publishes were not contended")
	}
	// State's version is the one the migration published last; the
	// competing publisher may have published after it.
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st.Version = cur.Version
	doneState(t, st)
	c.checkData(st)
	// Every range of the new ring is owned by its old owner or by shard5.
	for _, s := range c.ring.Shards() {
		for _, r := range cur.Ring.Ranges(s) {
			if o := c.ring.Owner(r.Hi); o != s {
				t.Errorf("range %s went from %s to %s", r, o, s)
			}
		}
	}
	// The versions only went up (History is newest first), and each
	// cutover is in the history once.
	hist, err := c.store.History(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	cutovers := map[string]int{}
	for i, h := range hist {
		if i > 0 && h.Version >= hist[i-1].Version {
			t.Fatalf("history not increasing: v%d before v%d", h.Version, hist[i-1].Version)
		}
		if strings.HasPrefix(h.Reason, "cutover of move") {
			cutovers[h.Reason]++
		}
	}
	for r, n := range cutovers {
		if n != 1 {
			t.Errorf("%q published %d times", r, n)
		}
	}
	if len(cutovers) != 4 {
		t.Errorf("%d cutover versions in the history, want 4: %v", len(cutovers), cutovers)
	}
}

// TestFaultTruncateAndDDLMidMove: while every move waits for cutover
// approval (CDC running), TRUNCATE of a moving table on a source is refused
// by the guard; then a column is added by hand on one source and a row
// written with it: the move out of that source waits (it does not stop),
// and reshard status says which shard lacks which column and the schema
// apply that fixes it; schema apply adds the column everywhere (already
// there on the source), the move resumes by itself, the row arrives with
// its new column, and the migration ends with every acknowledged write on
// its owner.
func TestFaultTruncateAndDDLMidMove(t *testing.T) {
	wall(t)
	c := newCluster(t, 5_000)
	c.registerKeyspace()
	c.startWorker()
	c.startWriters()
	req := c.request("f_ddl")
	req.RequireApproval = true
	run := c.start(req)
	deadline := time.Now().Add(5 * time.Minute)
	st := c.waitFor(run, deadline, "every move waiting for approval", func(st workflows.MigrationState) bool {
		return allPast(st, workflows.PhaseVerify)
	})
	ctx := context.Background()
	for _, tbl := range []string{"users", "orders"} {
		before := c.dbs[shard(1)].QueryInt64(t, `SELECT count(*) FROM `+tbl)
		_, err := c.dbs[shard(1)].Pool.Exec(ctx, `TRUNCATE `+tbl+` CASCADE`)
		t.Logf("TRUNCATE %s on shard1: %v", tbl, err)
		if err == nil || !strings.Contains(err.Error(), "TRUNCATE of public."+tbl+" is refused while a move of its token ranges runs") {
			t.Fatalf("TRUNCATE %s on a source mid-move: %v", tbl, err)
		}
		if after := c.dbs[shard(1)].QueryInt64(t, `SELECT count(*) FROM `+tbl); after < before-50 {
			t.Fatalf("%s on shard1: %d rows before the refused TRUNCATE, %d after", tbl, before, after)
		}
	}
	var mv workflows.MoveSpec
	for _, m := range st.Moves {
		if m.Spec.Source == shard(2) {
			mv = m.Spec
		}
	}
	c.dbs[shard(2)].Exec(t, `ALTER TABLE users ADD COLUMN nickname text`)
	k := victimKey(mv.Ranges)
	c.dbs[shard(2)].Exec(t, `UPDATE users SET name = 'after-ddl', nickname = 'x' WHERE id = $1`, k)
	ddl := time.Now()
	want := "the applier waits for target " + mv.Target + " to get column nickname of public.users, which source shard2 has: run reshard schema apply"
	var status string
	for {
		out, _ := c.cli("status", req.ID)
		if strings.Contains(out, want) {
			status = out
			break
		}
		if ms, ok := c.moveState(req.ID, mv.ID); ok && (ms.Stopped || ms.Error != "") {
			t.Fatalf("the move out of shard2 stopped on the DDL instead of waiting: %s", ms.Error)
		}
		if time.Since(ddl) > 2*time.Minute {
			t.Fatalf("status does not explain the wait after 2m:\n%s\n%s", out, c.workerLogs())
		}
		time.Sleep(time.Second)
	}
	t.Logf("status %s after the ALTER TABLE on shard2 only:\n%s", time.Since(ddl).Round(time.Second), status)
	if !strings.Contains(status, "'ALTER TABLE public.users ADD COLUMN nickname text'") {
		t.Errorf("status does not give the schema apply that adds the column")
	}
	time.Sleep(3 * time.Second) // the move keeps waiting, the writers keep writing
	if ms, ok := c.moveState(req.ID, mv.ID); !ok || ms.Stopped || ms.Error != "" {
		t.Fatalf("the move out of shard2 stopped while it waited: %+v", ms)
	}
	out, code := c.cli("schema", "apply", "ALTER TABLE users ADD COLUMN nickname text")
	t.Logf("schema apply: exit %d\n%s", code, out)
	if code != 0 || !strings.Contains(out, "shard2: add column nickname: already there") || !strings.Contains(out, mv.Target+": add column nickname: applied") {
		t.Fatalf("schema apply: exit %d", code)
	}
	for time.Since(ddl) < 3*time.Minute {
		if c.dbs[mv.Target].QueryInt64(t, `SELECT count(*) FROM users WHERE id = $1 AND nickname = 'x'`, k) == 1 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if n := c.dbs[mv.Target].QueryInt64(t, `SELECT count(*) FROM users WHERE id = $1 AND nickname = 'x' AND name = 'after-ddl'`, k); n != 1 {
		t.Fatalf("the write after the DDL did not reach %s once the shards agreed\n%s", mv.Target, c.workerLogs())
	}
	t.Logf("the move resumed %s after the ALTER TABLE on shard2", time.Since(ddl).Round(time.Second))
	c.approve(run.GetID())
	st = c.wait(run, time.Until(deadline)+3*time.Minute)
	c.stopWriters()
	t.Logf("moves: %s", summary(st))
	doneState(t, st)
	c.checkData(st)
	if n := c.dbs[mv.Target].QueryInt64(t, `SELECT count(*) FROM users WHERE id = $1 AND nickname = 'x'`, k); n != 1 {
		t.Errorf("the row written with the new column is not on its new owner %s", mv.Target)
	}
}
