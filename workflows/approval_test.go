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
			// Not shown as waiting for approval: it invites an approve
			// that cannot cut over a target the stream left behind.
			if !m.Stopped || m.Waiting != "" || strings.Contains(m.PhaseText(), "approval") || !strings.Contains(m.Error, "reshard resume") {
				t.Errorf("stream stopped while waiting for approval, move %s: stopped %v, waiting %q, shown %q, error %q; want stopped, not waiting, and resume named",
					m.Spec.ID, m.Stopped, m.Waiting, m.PhaseText(), m.Error)
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

// A move whose stream stopped for good while it waited for approval refuses
// an approval (it names resume), and once resumed restarts its stream, waits
// for approval again and, approved, cuts over and completes.
func TestStreamStoppedWhileAwaitingApprovalResumes(t *testing.T) {
	env, f := newEnv(t)
	req := testRequest()
	req.RequireApproval = true
	f.cdcLife = func(n int) time.Duration {
		if n <= 2 {
			return 3 * time.Hour
		}
		return 10000 * time.Hour
	}
	f.cdcEnd = func(n int) error {
		if n == 1 || n == 2 {
			return temporal.NewNonRetryableApplicationError(`unique constraint "users_email_key" of public.users: Key (email)=(a@x) already exists on the target: ...`, ErrTypeCollision, nil)
		}
		return nil
	}
	var apErr, reErr, ap2Err error
	var apDone, reDone, ap2Done bool
	env.RegisterDelayedCallback(func() { update(env, UpdateApprove, &apErr, &apDone) }, 5*time.Hour)
	env.RegisterDelayedCallback(func() { update(env, UpdateResume, &reErr, &reDone) }, 6*time.Hour)
	env.RegisterDelayedCallback(func() {
		for _, m := range queryState(t, env).Moves {
			if m.Stopped || m.Waiting != WaitApproval || m.Error != "" {
				t.Errorf("after resume, move %s: stopped %v, waiting %q, error %q; want waiting for approval again", m.Spec.ID, m.Stopped, m.Waiting, m.Error)
			}
		}
		if n := f.count(ActivityCutover + "/t_m1"); n != 0 {
			t.Errorf("cutover ran %d times before approval", n)
		}
		update(env, UpdateApprove, &ap2Err, &ap2Done)
	}, 7*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if !apDone || apErr == nil || !strings.Contains(apErr.Error(), "needs reshard resume first") {
		t.Fatalf("approve of a stopped move: done=%v err=%v, want a rejection naming resume", apDone, apErr)
	}
	if !reDone || reErr != nil || !ap2Done || ap2Err != nil {
		t.Fatalf("resume: done=%v err=%v; approve after it: done=%v err=%v", reDone, reErr, ap2Done, ap2Err)
	}
	if st.Phase != PhaseDone || f.count(ActivityCutover+"/t_m1") == 0 {
		t.Fatalf("migration ended %s after %d cutovers of t_m1", st.Phase, f.count(ActivityCutover+"/t_m1"))
	}
}
