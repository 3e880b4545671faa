package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
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
	var resume error
	var resumeDone bool
	env.RegisterDelayedCallback(func() {
		st := queryState(t, env)
		stopped := 0
		for _, m := range st.Moves {
			if m.Stopped {
				stopped++
				if m.Phase != PhaseCutover || !strings.Contains(m.Error, "stopped in CUTOVER: "+msg) || !strings.Contains(m.Error, "reshard resume t runs CUTOVER again") {
					t.Errorf("move %s: phase %s, error %q", m.Spec.ID, m.Phase, m.Error)
				}
			}
		}
		if stopped != 1 || st.Phase.Terminal() {
			t.Errorf("%d moves stopped, migration %s", stopped, st.Phase)
		}
		update(env, UpdateResume, &resume, &resumeDone)
	}, 3*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !resumeDone || resume != nil {
		t.Fatalf("resume: done %v, %v", resumeDone, resume)
	}
	if st.Phase != PhaseDone {
		t.Fatalf("migration ended %s (%s), want DONE", st.Phase, st.Error)
	}
	if n := f.count(ActivityPrepareReverse); n != len(st.Moves)+1 {
		t.Fatalf("PrepareReverse ran %d times for %d moves, want one more for the resumed cutover", n, len(st.Moves))
	}
}
