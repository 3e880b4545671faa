//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/workflows"
)

// TestRollbackDuringGraceUnderAdaptiveThrottle is TestRollbackDuringGrace
// with adaptive limits set: copy, verify and the rollback's deletes on the
// new owner run under the adaptive throttle (its baseline measured on that
// shard in GRACE, with the application writing to it), and the rollback
// still ends with nothing lost and nothing left on shard5.
func TestRollbackDuringGraceUnderAdaptiveThrottle(t *testing.T) {
	rollbackDuringGrace(t, "e2e_grb_adaptive", &workflows.AdaptiveThrottle{MaxLatencyIncrease: 400, MaxActiveBackends: 64})
}

// TestThrottleChangeReachesRunningVerify changes the throttle while the
// moves verify: verify starts at 100 rows/s and, once a move is in VERIFY,
// the throttle goes back to unlimited. The running verify asks its move for
// the throttle in force through the real server and takes the change (the
// worker says so); the migration then ends with nothing lost.
func TestThrottleChangeReachesRunningVerify(t *testing.T) {
	c := newCluster(t, 5_000)
	c.startWorker()
	c.startWriters()
	req := c.request("e2e_live_throttle")
	run := c.start(req)
	throttle := func(th workflows.Throttle, updateID string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h, err := c.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{UpdateID: updateID, WorkflowID: run.GetID(),
			UpdateName: workflows.UpdateThrottle, Args: []any{th}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			t.Fatalf("throttle %+v: %v", th, err)
		}
	}
	waitFor := func(what string, ok func(workflows.MigrationState) bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			st, got := c.state(run.GetID())
			if got && ok(st) {
				return
			}
			if time.Now().After(deadline) || st.Phase.Terminal() {
				t.Fatalf("no %s: %s\n%s", what, c.describe(run.GetID()), c.workerLogs())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Slowed while the moves still copy: with the stream during the copy
	// (the default) their catch-up is over at once, and a throttle asked
	// once they were past the copy reached them after a verify of a few
	// hundred rows unthrottled had ended (make e2e, 2026-12-04 10:41).
	waitFor("moves copying", func(st workflows.MigrationState) bool {
		return len(st.Moves) == 4 && slices.ContainsFunc(st.Moves, func(m workflows.MoveState) bool { return m.Phase == workflows.PhaseSnapshotCopy })
	})
	throttle(workflows.Throttle{RowsPerSec: 100}, "slow")
	waitFor("move in VERIFY", func(st workflows.MigrationState) bool {
		return slices.ContainsFunc(st.Moves, func(m workflows.MoveState) bool { return m.Phase == workflows.PhaseVerify })
	})
	time.Sleep(3 * time.Second) // verify runs at 100 rows/s a while
	throttle(workflows.Throttle{}, "unlimited")
	st := c.wait(run, 5*time.Minute)
	c.stopWriters()
	if st.Phase != workflows.PhaseDone {
		t.Fatalf("migration ended %s: %s", st.Phase, st.Error)
	}
	logs := c.allWorkerLogs()
	if n := strings.Count(logs, "throttle changed while the work runs"); n == 0 {
		t.Fatalf("no running work took the throttle change; worker logs:\n%s", c.workerLogs())
	} else {
		t.Logf("running work that took a throttle change: %d", n)
	}
	cur, err := c.store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mm, err := c.ledger.Check(context.Background(), usersTable, c.pools, func(k int64) string { return cur.Ring.OwnerInt64(k) })
	if err != nil || len(mm) > 0 {
		t.Fatalf("ledger: %v %v", err, mm)
	}
}
