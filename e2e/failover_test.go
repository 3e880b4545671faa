//go:build e2e

package e2e

// Failovers of a move's TARGET (issue #30), one scenario each, with the
// harness of failoverharness_test.go: shard5, the new shard of an add-node,
// runs on a primary and its synchronous standby; its primary is killed (or
// stopped cleanly) at the scenario's moment and the standby promoted, under
// the ledger writers. Each ends DONE (ROLLED_BACK when it asks) with no
// operator action beyond the scenario's approvals, every acknowledged write
// on its owner, every row on its owner, topology check clean. Each prints
// the longest window of refused writes to a key of each move.
// Run with make e2e, or:
//
//	PATH=$PATH:/root/go/bin go test -tags e2e -count=1 -timeout 30m ./e2e/ -run 'TestTarget' -v

import (
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/workflows"
)

// TestTargetFailoverInSnapshotCopy: the target fails over while the moves
// copy (throttled, so that the copy lasts): the copy's chunks and their
// checkpoints commit together on the target, so the copy resumes on the
// promoted target from the checkpoints it holds.
func TestTargetFailoverInSnapshotCopy(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_tgt_copy", users: 20_000,
		tweak: func(r *workflows.MigrationRequest) {
			r.Throttle = workflows.Throttle{RowsPerSec: 600}
			r.ChunkRows = 100
		},
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			c.waitFor(run, deadline, "a move copying, some rows copied", func(st workflows.MigrationState) bool {
				for _, m := range st.Moves {
					if ms, ok := c.moveState("fo_tgt_copy", m.Spec.ID); ok && ms.Phase == workflows.PhaseSnapshotCopy && ms.RowsCopied > 500 {
						return true
					}
				}
				return false
			})
			h.failover(c, run, false)
		}})
}

// TestTargetFailoverInCatchUp: the target fails over as soon as a move is
// in CDC_CATCH_UP (the copy throttled so that the moves reach it one after
// another; the others are copying or verifying).
func TestTargetFailoverInCatchUp(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_tgt_catchup", users: 20_000,
		tweak: func(r *workflows.MigrationRequest) { r.Throttle = workflows.Throttle{RowsPerSec: 600} },
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			c.waitFor(run, deadline, "a move in CDC_CATCH_UP", func(st workflows.MigrationState) bool {
				_, in := anyIn(st, workflows.PhaseCDCCatchUp)
				return in
			})
			h.failover(c, run, false)
		}})
}

// TestTargetFailoverInWritePause: the target fails over while a cutover
// holds its source fenced (the move out of shard2, held in its write pause
// by a transaction left open on shard2). Writes to the moves' ranges are
// refused for at most the cutover budget + the failover + 2 s.
func TestTargetFailoverInWritePause(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_tgt_pause",
		tweak: func(r *workflows.MigrationRequest) { r.RequireApproval = true },
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			waitingApproval(c, run, deadline)
			p := c.holdInPause(run, shard(2), deadline)
			h.failover(c, run, false)
			p.release()
			p.stop()
		},
		window: func(req workflows.MigrationRequest, f failoverRun) time.Duration {
			return req.WithDefaults().CutoverBudget + f.Took + 2*time.Second
		}})
}

// inGrace waits until every move is in GRACE (its reverse stream, from
// shard5 back to the old owner, running).
func inGrace(c *cluster, run client.WorkflowRun, deadline time.Time) {
	c.waitFor(run, deadline, "every move in GRACE", func(st workflows.MigrationState) bool {
		return len(st.Moves) == 4 && allPast(st, workflows.PhaseCutover)
	})
}

// TestTargetFailoverInGrace: the new owner fails over in GRACE, where it
// is the reverse stream's source; complete then ends the migration DONE.
func TestTargetFailoverInGrace(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_tgt_grace", inGrace: true,
		tweak: func(r *workflows.MigrationRequest) { r.GracePeriod = new(10 * time.Minute) },
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			inGrace(c, run, deadline)
			h.failover(c, run, false)
			time.Sleep(5 * time.Second) // writes on the new primary, for the reverse stream
			msg, err := c.update(run.GetID(), workflows.UpdateComplete)
			if err != nil {
				c.t.Fatalf("complete: %v", err)
			}
			c.t.Logf("complete: %s", msg)
		}})
}

// TestTargetFailoverInGraceThenRollback: the new owner fails over in
// GRACE, then the operator asks for a rollback: the writes the new owner
// took before and after the failover must all be on the old owners. The
// reverse stream reads the new owner as its source, and its slot does not
// survive the promotion (PostgreSQL 15): the reverse slot is created again
// on the new primary, the old owners' copies of the moving ranges repaired
// from the new owner, and the rollback drains the new slot.
func TestTargetFailoverInGraceThenRollback(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_tgt_grace_rb", inGrace: true,
		tweak: func(r *workflows.MigrationRequest) { r.GracePeriod = new(10 * time.Minute) },
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			inGrace(c, run, deadline)
			h.failover(c, run, false)
			time.Sleep(5 * time.Second)
			msg, err := c.update(run.GetID(), workflows.UpdateRollback)
			if err != nil {
				c.t.Fatalf("rollback: %v", err)
			}
			c.t.Logf("rollback: %s", msg)
		},
		check: func(c *cluster, st workflows.MigrationState) {
			logFailovers(c, st, 4)
			c.checkRolledBack(st)
		}})
}

// logFailovers prints the failovers the migration's moves recorded (what
// their recovery re-copied) and fails unless want of them did.
func logFailovers(c *cluster, st workflows.MigrationState, want int) {
	c.t.Helper()
	n := 0
	for _, m := range st.Moves {
		for _, e := range m.Failovers {
			n++
			c.t.Logf("move %s: %s", m.Spec.ID, e.String())
		}
	}
	if n != want {
		c.t.Errorf("%d failovers recorded by the moves, want %d", n, want)
	}
}

// TestTargetSwitchoverWhileStreaming: a planned switchover of the target
// (pg_ctl stop -m fast, then promote) while every move's stream runs: the
// old primary stops, and the standby is promoted, in under 10 s.
func TestTargetSwitchoverWhileStreaming(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_tgt_switch",
		tweak: func(r *workflows.MigrationRequest) { r.RequireApproval = true },
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			waitingApproval(c, run, deadline)
			f := h.failover(c, run, true)
			if f.Took > 10*time.Second {
				c.t.Errorf("the switchover took %s with the streams running, want < 10s", f.Took)
			}
			time.Sleep(2 * time.Second)
			c.approve(run.GetID())
		}})
}

// TestTargetFailoverWhileStreaming: the target's primary is
// killed while every move's stream runs (verified, waiting for the
// cutover's approval) and its synchronous standby promoted; the streams
// resume from the origin on the new primary, the cutovers approved after
// it run there, and the migration ends DONE with the ledger's checks.
func TestTargetFailoverWhileStreaming(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_tgt_stream", users: 2_000,
		tweak: func(r *workflows.MigrationRequest) { r.RequireApproval, r.GracePeriod = true, new(2*time.Second) },
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			waitingApproval(c, run, deadline)
			h.failover(c, run, false)
			time.Sleep(2 * time.Second) // writes and the streams go on on the new primary
			c.approve(run.GetID())
		}})
}
