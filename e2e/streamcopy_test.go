//go:build e2e

package e2e

// --stream-during-copy through the real workflow: each move's stream runs
// beside its copy through the copy gate. A worker killed during the gated
// copy, and a rollback during it, end with the ledger checks.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/workflows"
)

// TestStreamDuringCopyWorkerKilled: add-node with --stream-during-copy and
// writers through the router; when a move has copied 30–60% of its rows,
// its state says the stream runs beside the copy and shows a lag the
// workflow read; the worker is killed (SIGKILL) then, with copy slices and
// the streams in flight, and a new one started. The migration ends DONE
// and every acknowledged write is on its owner, once (checkData: nothing
// lost, duplicated or resurrected).
func TestStreamDuringCopyWorkerKilled(t *testing.T) {
	wall(t)
	c, run := startStreamedCopy(t, 40_000, "sdc_kill")
	deadline := time.Now().Add(6 * time.Minute)
	st := c.planned(run, deadline)
	total := c.copyTotals(st)
	victim, _ := c.copyingAt(run, st, total, 0.3, 0.6, deadline, func(ms workflows.MoveState) bool { return !ms.LagAt.IsZero() })
	if !victim.StreamDuringCopy || !strings.Contains(victim.PhaseText(), "stream running beside the copy") {
		t.Fatalf("move %s in its copy: stream during copy %v, phase %q", victim.Spec.ID, victim.StreamDuringCopy, victim.PhaseText())
	}
	t.Logf("move %s at %d/%d rows: %s, lag %s at %s", victim.Spec.ID, victim.RowsCopied, total[victim.Spec.ID], victim.PhaseText(), victim.LagText(), victim.LagAt.Format(time.TimeOnly))
	c.killWorker()
	c.startWorker()
	c.endsDone(run, time.Until(deadline)+time.Minute)
}

// startStreamedCopy starts a cluster of users, its worker and its writers,
// and add-node id with --stream-during-copy, copies throttled to 200 rows
// a second in chunks of 50.
func startStreamedCopy(t *testing.T, users int, id string) (*cluster, client.WorkflowRun) {
	c := newCluster(t, users)
	c.startWorker()
	c.startWriters()
	req := c.request(id)
	req.StreamDuringCopy = true
	req.Throttle = workflows.Throttle{RowsPerSec: 200}
	req.ChunkRows = 50
	return c, c.start(req)
}

// TestStreamDuringCopyRolledBack: a rollback asked while the moves copy
// beside their streams: the streams stop, their slots and publications
// are dropped, shard5 keeps no row, and every acknowledged write is on its
// old owner (checkRolledBack).
func TestStreamDuringCopyRolledBack(t *testing.T) {
	wall(t)
	c, run := startStreamedCopy(t, 20_000, "sdc_rb")
	deadline := time.Now().Add(4 * time.Minute)
	c.waitFor(run, deadline, "a move copying beside its stream", func(st workflows.MigrationState) bool {
		for _, m := range st.Moves {
			if m.Phase == workflows.PhaseSnapshotCopy && m.StreamDuringCopy && m.RowsCopied > 0 {
				return true
			}
		}
		return false
	})
	msg, err := c.update(run.GetID(), workflows.UpdateRollback)
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	t.Logf("rollback: %s", msg)
	st := c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	var phases []string
	for _, m := range st.Moves {
		var ps []workflows.Phase
		for _, tm := range m.Timings {
			ps = append(ps, tm.Phase)
		}
		phases = append(phases, fmt.Sprintf("%s %v", m.Spec.ID, ps))
	}
	t.Logf("moves: %s", strings.Join(phases, "; "))
	c.checkRolledBack(st)
}

// TestSourceFailoverInStreamedCopy: TestSourceFailoverInSnapshotCopy with
// the stream beside the copy: the source fails over while its move copies
// through the gate; the slot is made again on the new primary, the rest of
// the copy runs without the stream, the repair after the copy rewrites
// what differs, the stream starts from the new slot, and every
// acknowledged write ends on its owner (runTargetScenario's checks).
func TestSourceFailoverInStreamedCopy(t *testing.T) {
	runTargetScenario(t, targetScenario{id: "fo_src_gated", users: 20_000, source: true, recoveredIn: workflows.PhaseSnapshotCopy,
		tweak: func(r *workflows.MigrationRequest) {
			r.Throttle = workflows.Throttle{RowsPerSec: 600}
			r.ChunkRows = 100
			r.StreamDuringCopy = true
		},
		land: func(c *cluster, h *haShard, run client.WorkflowRun, deadline time.Time) {
			sourceMoveIn(c, run, "fo_src_gated", workflows.PhaseSnapshotCopy, deadline, func(ms workflows.MoveState) bool {
				return ms.RowsCopied > 300 && ms.StreamDuringCopy && !ms.LagAt.IsZero()
			})
			h.failover(c, run, false)
		}})
}
