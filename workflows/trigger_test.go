package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
)

// A trigger switched to ENABLE ALWAYS after PLAN, found by the check before
// the cutover (PrepareReverse): the move stops in CUTOVER, before any write
// there, naming the trigger and its fix, instead of failing; resume runs the
// cutover again once it is fixed.
func TestFiringTriggerStopsTheCutoverUntilResumed(t *testing.T) {
	env, f := newEnv(t)
	const msg = `move t_m1: a trigger or rule fires for reshard's writes, enabled after the move was planned: trigger audit on shard1 of public.users is ENABLE ALWAYS`
	f.prepareReverse = func(in MoveRef, n int) (JoinResult, error) {
		if n == 1 {
			return JoinResult{}, temporal.NewNonRetryableApplicationError(msg, ErrTypeFiringTrigger, nil)
		}
		return JoinResult{L0: "0/2000000"}, nil
	}
	var r *resumed
	env.RegisterDelayedCallback(func() {
		r = resumeStopped(t, env, func(m MoveState) {
			if m.Phase != PhaseCutover || !strings.Contains(m.Error, "stopped in CUTOVER: "+msg) || !strings.Contains(m.Error, "reshard resume t runs CUTOVER again") {
				t.Errorf("move %s: phase %s, error %q", m.Spec.ID, m.Phase, m.Error)
			}
		})
	}, 3*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := r.wantDone(t, env)
	if n := f.count(ActivityPrepareReverse); n != len(st.Moves)+1 {
		t.Fatalf("PrepareReverse ran %d times for %d moves, want one more for the resumed cutover", n, len(st.Moves))
	}
}

// resumed is an operator's resume of a migration with a move stopped for
// the operator (resumeStopped).
type resumed struct {
	err  error
	done bool
}

// resumeStopped, run from a delayed callback, wants exactly one move
// stopped for the operator, which check looks at, and the migration not
// over; then it resumes the migration.
func resumeStopped(t *testing.T, env *testsuite.TestWorkflowEnvironment, check func(MoveState)) *resumed {
	r := &resumed{}
	st := queryState(t, env)
	stopped := 0
	for _, m := range st.Moves {
		if m.Stopped {
			stopped++
			check(m)
		}
	}
	if stopped != 1 || st.Phase.Terminal() {
		t.Errorf("%d moves stopped, migration %s", stopped, st.Phase)
	}
	update(env, UpdateResume, &r.err, &r.done)
	return r
}

// wantDone wants the resume taken and the migration ended DONE.
func (r *resumed) wantDone(t *testing.T, env *testsuite.TestWorkflowEnvironment) MigrationState {
	t.Helper()
	st := result[MigrationState](t, env)
	if r == nil || !r.done || r.err != nil {
		t.Fatalf("resume: %+v", r)
	}
	if st.Phase != PhaseDone {
		t.Fatalf("migration ended %s (%s), want DONE", st.Phase, st.Error)
	}
	return st
}
