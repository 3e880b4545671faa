//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// In make e2e, not make test. It failed 2 of 7 full runs once ("the
// migration ended before its cutovers were approved"): a move failed by a
// kill landing while it created its CDC session, which this test's kill in
// CDC_CATCH_UP does (a move enters the phase by creating it); such a move
// now creates the session again on the new worker (workflows,
// retry-session-creation, 1592dcb, after the test left make test). It
// passed 5 of 5 runs since, but took 84-187 s on this shared machine (load
// 11-22), over the ~90 s make test can spend on it. The failure prints the
// migration's state and the workers' logs; the log line says when each kill
// landed and how long the migration took.
// TestWorkerKilledInEveryPhase kills the worker with SIGKILL while moves are
// in each phase and starts a new one; the migration must still end DONE with
// the data correct. The copy and verify are throttled and cutover waits for
// approval so that each phase lasts long enough to be hit.
func TestWorkerKilledInEveryPhase(t *testing.T) {
	c := newCluster(t, 20_000)
	c.workerArgs = forceSQLCatchUp // killed while peeking, too
	c.startWorker()
	c.startWriters()
	req := c.request("e2e_kill")
	req.Throttle = workflows.Throttle{RowsPerSec: 600}
	req.RequireApproval = true
	req.GracePeriod = new(20 * time.Second)
	run := c.start(req)
	started := time.Now()

	kills := []workflows.Phase{workflows.PhaseSnapshotCopy, workflows.PhaseCDCCatchUp, workflows.PhaseVerify, workflows.PhaseCutover, workflows.PhaseGrace}
	var killedIn []string
	parentPhases := map[workflows.Phase]bool{}
	deadline := time.Now().Add(4 * time.Minute)
	approved := false
	for len(kills) > 0 && time.Now().Before(deadline) {
		st, ok := c.state(run.GetID())
		if !ok {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if st.Phase.Terminal() {
			break
		}
		parentPhases[st.Phase] = true
		want := kills[0]
		if m, hit := anyIn(st, want); hit {
			c.killWorker()
			killedIn = append(killedIn, fmt.Sprintf("%s (%s, at %s)", want, m, time.Since(started).Round(time.Second)))
			kills = kills[1:]
			c.startWorker()
			continue
		}
		if !approved && allPast(st, workflows.PhaseVerify) && len(kills) > 0 && kills[0] != workflows.PhaseCutover {
			c.approve(run.GetID())
			approved = true
		}
		if beyond(st, want) {
			t.Errorf("no move was seen in %s (moves: %s); the phase went by between two polls", want, phasesNow(st))
			kills = kills[1:]
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !approved {
		// Wait until a move is waiting in CUTOVER (it was killed there).
		for time.Now().Before(deadline) {
			st, ok := c.state(run.GetID())
			if ok && st.Phase.Terminal() {
				t.Fatalf("the migration ended %s before its cutovers were approved (killed in %v): %s\n%s", st.Phase, killedIn, c.describe(run.GetID()), c.workerLogs())
			}
			if ok && allPast(st, workflows.PhaseVerify) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.approve(run.GetID())
	}
	st := c.wait(run, time.Until(deadline)+time.Minute)
	took := time.Since(started)
	c.stopWriters()
	c.recordHistories(st, "worker-kills")
	t.Logf("killed the worker in: %s; ended %s after %s; %d workers in all; moves: %s; catch-ups by SQL: %d (%d reading ahead); CDC session creations retried: %d",
		strings.Join(killedIn, ", "), st.Phase, took.Round(time.Second), c.nWorkers, summary(st), c.sqlCatchUps(), c.readAheadCatchUps(), strings.Count(c.allWorkerLogs(), "creating the CDC session failed; trying again"))
	if c.sqlCatchUps() == 0 {
		t.Error("no stream caught up by SQL peeks, forced to")
	}
	if len(kills) > 0 {
		t.Errorf("not killed in %v: the migration ended first", kills)
	}
	// The migration's own phase (status, search attribute) followed the moves.
	for _, p := range []workflows.Phase{workflows.PhaseSnapshotCopy, workflows.PhaseCutover} {
		if !parentPhases[p] {
			t.Errorf("the migration never said %s (it said %v)", p, parentPhases)
		}
	}
	checkState(t, st, false)
	c.checkData(st)
}
