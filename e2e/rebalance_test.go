//go:build e2e

package e2e

import (
	"context"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/workflows"
)

// TestRebalanceFourToSixTwoWorkers (issue #16): 4 → 6 shards by one
// rebalance, planned with the least movement (2/6 of the token space, each
// range moved once), run by two worker processes on one task queue; one is
// SIGKILLed while the moves copy and never restarted: the other finishes
// every move, nothing acknowledged is lost, every row ends on its owner.
func TestRebalanceFourToSixTwoWorkers(t *testing.T) {
	wall(t)
	c := newCluster(t, 8_000)
	c.addShard(6)
	c.startWorker()
	victim, victimExited := c.worker, c.exited
	c.startWorker()
	c.startWriters()
	req := c.request("e2e_rebal")
	req.Kind, req.Shard, req.Add = workflows.KindRebalance, "", []string{shard(5), shard(6)}
	req.Throttle = workflows.Throttle{RowsPerSec: 300} // a copy long enough to kill a worker in
	run := c.start(req)
	deadline := time.Now().Add(6 * time.Minute)
	c.waitFor(run, deadline, "a move copying", func(st workflows.MigrationState) bool {
		_, ok := anyIn(st, workflows.PhaseSnapshotCopy)
		return ok
	})
	time.Sleep(2 * time.Second)
	_ = victim.Process.Kill()
	<-victimExited
	t.Logf("worker 1 (pid %d) killed while the moves copy; worker 2 carries on alone", victim.Process.Pid)

	st := c.wait(run, time.Until(deadline))
	c.stopWriters()
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("rebalance ended %s: %s\n%s", st.Phase, st.Error, c.workerLogs())
	}
	if math.Abs(st.MovedFraction-2.0/6) > 0.01 {
		t.Fatalf("moved fraction %.4f, want 2/6 (the least a 4 → 6 change can move)", st.MovedFraction)
	}
	var targets []string
	for _, m := range st.Moves {
		if m.Phase != workflows.PhaseDone || m.Verify == nil || !m.Verify.Passed {
			t.Fatalf("move %s: %s", m.Spec.ID, m.Phase)
		}
		if !slices.Contains(targets, m.Spec.Target) {
			targets = append(targets, m.Spec.Target)
		}
		if m.Spec.Target != shard(5) && m.Spec.Target != shard(6) {
			t.Fatalf("move %s goes %s → %s: only the new shards receive", m.Spec.ID, m.Spec.Source, m.Spec.Target)
		}
	}
	t.Logf("rebalance: moved %.4f of the space in %d moves to %v: %s", st.MovedFraction, len(st.Moves), targets, summary(st))
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !cur.Ring.HasShard(shard(6)) {
		t.Fatal("shard6 is not in the final ring")
	}
	c.checkData(st) // every user on its owner once, every order, the ledger
}

// TestRebalanceWeight (issue #16): a rebalance that only changes a weight
// (shard1 weighs 2) runs end to end under writers. Its moves carry exactly
// the ranges the planner gives for that change on the registry's weights;
// every move ends DONE; the final ring is the planned one; the registry has
// the new weight, which topology show and ring show print; every row is on
// its owner. A second weight change (shard2 weighs 3) rolled back in GRACE
// leaves the ring and the weights as the first one left them.
func TestRebalanceWeight(t *testing.T) {
	wall(t)
	ctx := context.Background()
	c := newCluster(t, 6_000)
	c.startWorker()
	c.startWriters()

	// The plan the workflow must run, made here as its planner makes it.
	planned := func(req workflows.MigrationRequest, from *ring.Ring) (*ring.Ring, []ring.Move) {
		t.Helper()
		shards, err := c.store.Shards(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var reg []ring.Shard
		for _, sh := range shards {
			reg = append(reg, ring.Shard{Name: sh.Name, Weight: sh.Weight, Domain: sh.FailureDomain})
		}
		next, moves, err := ring.PlanChange(from, reg, ring.Change{Kind: string(req.Kind), Weights: req.Weights, Opts: ring.Options{VNodes: req.VNodes}})
		if err != nil {
			t.Fatal(err)
		}
		return next, moves
	}
	// pairs is "from>to range" of every range, sorted: the moves' ranges.
	pairs := func(moves []ring.Move) []string {
		var out []string
		for _, m := range moves {
			out = append(out, m.From+">"+m.To+" "+m.Range.String())
		}
		slices.Sort(out)
		return out
	}
	weights := func() map[string]float64 {
		t.Helper()
		shards, err := c.store.Shards(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, sh := range shards {
			out[sh.Name] = sh.Weight
		}
		return out
	}

	req := c.request("e2e_weight")
	req.Kind, req.Shard, req.Weights = workflows.KindRebalance, "", map[string]float64{shard(1): 2}
	want, wantMoves := planned(req, c.ring)
	st := c.wait(c.start(req), 6*time.Minute)
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("rebalance --weight shard1=2 ended %s: %s\n%s", st.Phase, st.Error, c.workerLogs())
	}
	var got []ring.Move
	for _, m := range st.Moves {
		if m.Phase != workflows.PhaseDone || m.Verify == nil || !m.Verify.Passed {
			t.Fatalf("move %s: %s", m.Spec.ID, m.Phase)
		}
		for _, r := range m.Spec.Ranges {
			got = append(got, ring.Move{Range: r, From: m.Spec.Source, To: m.Spec.Target})
		}
	}
	if !slices.Equal(pairs(got), pairs(wantMoves)) {
		t.Fatalf("the moves carried\n%v\nthe planner gives\n%v", pairs(got), pairs(wantMoves))
	}
	cur, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cur.Ring.VNodes(), want.VNodes()) {
		t.Fatalf("topology v%d's ring is not the planned one", cur.Version)
	}
	if share := cur.Ring.Share()[shard(1)]; math.Abs(share-0.4) > 1e-6 {
		t.Fatalf("shard1 owns %.4f of the space, want 2/5", share)
	}
	if w := weights(); w[shard(1)] != 2 || w[shard(2)] != 1 || w[shard(3)] != 1 || w[shard(4)] != 1 {
		t.Fatalf("registry weights after the rebalance: %v, want shard1 2 and the others 1", w)
	}
	t.Logf("weight shard1=2: moved %.4f of the space in %d moves (%d ranges); %s", st.MovedFraction, len(st.Moves), len(got), summary(st))
	// Both views print it: WEIGHT is ring show's last column and topology
	// show's fifth.
	for _, v := range []struct {
		args []string
		col  int
	}{{[]string{"ring", "show"}, -1}, {[]string{"topology", "show"}, 4}} {
		out, err := exec.Command(bin, append(v.args, "--config", c.config)...).CombinedOutput()
		if err != nil {
			t.Fatalf("reshard %s: %v\n%s", strings.Join(v.args, " "), err, out)
		}
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && f[0] == shard(1) {
				col := v.col
				if col < 0 {
					col = len(f) - 1
				}
				found = f[col] == "2"
			}
		}
		if !found {
			t.Fatalf("reshard %s does not show shard1's weight 2:\n%s", strings.Join(v.args, " "), out)
		}
	}

	// shard2 weighs 3, rolled back in GRACE: nothing of it stays.
	req2 := c.request("e2e_weight_rb")
	req2.Kind, req2.Shard, req2.Weights = workflows.KindRebalance, "", map[string]float64{shard(2): 3}
	req2.GracePeriod = new(10 * time.Minute)
	if _, moves := planned(req2, cur.Ring); len(moves) == 0 {
		t.Fatal("shard2=3 plans no move")
	}
	run := c.start(req2)
	deadline := time.Now().Add(4 * time.Minute)
	c.waitFor(run, deadline, "every move in GRACE", func(st workflows.MigrationState) bool {
		return len(st.Moves) > 0 && allPast(st, workflows.PhaseCutover)
	})
	if _, err := c.update(run.GetID(), workflows.UpdateRollback); err != nil {
		t.Fatalf("rollback in GRACE: %v", err)
	}
	st = c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	if st.Phase != workflows.PhaseRolledBack {
		t.Fatalf("the rolled back weight change ended %s: %s", st.Phase, st.Error)
	}
	end, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners := len(end.Migrating()) == 0
	for _, vn := range append(end.Ring.VNodes(), want.VNodes()...) {
		owners = owners && end.Ring.Owner(vn.Token) == want.Owner(vn.Token)
	}
	if w := weights(); !owners || w[shard(1)] != 2 || w[shard(2)] != 1 {
		t.Fatalf("after the rollback: owners as the first rebalance left them %v, weights %v (want shard1 2, shard2 1)", owners, w)
	}
	c.checkPlacement(end) // every row on its owner, none lost, the ledger read back
}
