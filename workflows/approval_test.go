package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
)

// A stream that stops for good (DDL on the source) while the move waits for
// approval is said in the move's state at once, and a rollback still works;
// a stream that merely lost its connection is restarted meanwhile.
func TestStreamStoppedWhileAwaitingApproval(t *testing.T) {
	env, f := newEnv(t)
	req := testRequest()
	req.RequireApproval = true
	f.cdcLife = func(n int) time.Duration {
		if n <= 2 {
			return 3 * time.Hour // both moves' first streams end while waiting
		}
		return 10000 * time.Hour
	}
	f.cdcEnd = func(n int) error {
		if n == 1 || n == 2 {
			return temporal.NewNonRetryableApplicationError("schema of public.users changed on the source during the move (columns only on the source: nickname): apply the same DDL on the target, then restart the stream", "SchemaChange", nil)
		}
		return nil
	}
	var upErr error
	var upDone bool
	env.RegisterDelayedCallback(func() {
		st := queryState(t, env)
		for _, m := range st.Moves {
			if m.Phase != PhaseCutover || !strings.Contains(m.Error, "schema of public.users changed on the source") {
				t.Errorf("waiting for approval with its stream stopped, move %s: phase %s, error %q", m.Spec.ID, m.Phase, m.Error)
			}
		}
		update(env, UpdateRollback, &upErr, &upDone)
	}, 5*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if !upDone || upErr != nil {
		t.Fatalf("rollback update: done=%v err=%v", upDone, upErr)
	}
	if st.Phase != PhaseRolledBack || f.count(ActivityCutover+"/t_m1") != 0 {
		t.Fatalf("migration ended %s after %d cutovers of t_m1", st.Phase, f.count(ActivityCutover+"/t_m1"))
	}
}
