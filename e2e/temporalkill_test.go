//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// ownTemporal is a Temporal dev server of one test, persisted to a file, so
// that the test can kill it and start it again with its history.
type ownTemporal struct {
	t   *testing.T
	srv devenv.Temporal
}

func startOwnTemporal(t *testing.T) *ownTemporal {
	t.Helper()
	if _, err := devenv.FindTemporal(); err != nil {
		pgtest.Unavailable(t, err)
	}
	dir := pgtest.TempDir(t, "temporal")
	ports, err := devenv.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	o := &ownTemporal{t: t, srv: devenv.Temporal{Port: ports[0], UIPort: ports[1], DBFile: filepath.Join(dir, "temporal.db"), Log: filepath.Join(dir, "temporal.log")}}
	o.start()
	t.Cleanup(func() { _ = devenv.StopTemporal(o.srv) })
	return o
}

func (o *ownTemporal) start() {
	o.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, _, err := devenv.StartTemporal(ctx, o.srv)
	if err != nil {
		o.t.Fatalf("start temporal: %v", err)
	}
	o.srv = srv
}

// kill SIGKILLs the server, as a crash would, and starts it again after down.
func (o *ownTemporal) kill(down time.Duration) {
	o.t.Helper()
	_ = syscall.Kill(-o.srv.Pid, syscall.SIGKILL)
	for i := 0; i < 100 && o.srv.Running(); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	o.t.Logf("temporal killed (pid %d); down for %s", o.srv.Pid, down)
	time.Sleep(down)
	o.start()
	o.t.Logf("temporal started again (pid %d)", o.srv.Pid)
}

// TestFaultTemporalKilledInCopyAndCutover kills the Temporal server (SIGKILL,
// back after 5 s) twice in one migration: while the moves copy, and while a
// cutover has its source fenced. The copy and the streams go on without it;
// the cutover's write pause does not depend on it; the migration reaches
// DONE with nothing lost.
func TestFaultTemporalKilledInCopyAndCutover(t *testing.T) {
	wall(t)
	tmp := startOwnTemporal(t)
	c := newClusterWith(t, 20_000, 0, tmp.srv)
	victimShard := shard(2)
	c.startWorker()
	c.startWriters()
	req := c.request("f_temporal")
	req.RequireApproval = true
	req.Throttle.RowsPerSec = 400 // a copy of ~4,000 rows per move takes ~10 s: long enough to be killed in
	budget := req.WithDefaults().CutoverBudget
	run := c.start(req)
	deadline := time.Now().Add(8 * time.Minute)
	c.waitFor(run, deadline, "a move copying", func(st workflows.MigrationState) bool {
		for _, m := range st.Moves {
			if m.Phase == workflows.PhaseSnapshotCopy {
				return true
			}
		}
		return false
	})
	time.Sleep(time.Second)
	tmp.kill(5 * time.Second)

	h := c.holdInPause(run, victimShard, deadline)
	// Kill Temporal while the source is fenced; the open transaction ends
	// a moment later, so the cutover can finish without Temporal.
	go func() {
		time.Sleep(200 * time.Millisecond)
		h.release()
	}()
	tmp.kill(5 * time.Second)

	st := c.wait(run, time.Until(deadline)+time.Minute)
	c.stopWriters()
	h.judge(st, budget+2*time.Second, fmt.Sprintf("budget %s + 2s: the pause does not wait for Temporal", budget), false, 0)
	for _, m := range st.Moves {
		t.Logf("move %s: %s, %d rows copied, write pause %s, %d cutover attempts", m.Spec.ID, m.Phase, m.RowsCopied, m.PauseText(), m.Attempts)
	}
	checkState(t, st, false)
	c.checkData(st)
}
