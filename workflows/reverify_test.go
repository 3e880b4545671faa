package workflows

import (
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// TestReverifyWhileTheStreamStopsIsKept: a reverify that reaches the move
// while it stops its stream for the verdict of a failed verify is kept: the
// verify runs again and the move goes on to DONE. Before f075f9f the move
// cleared its reverify flag only once the stream had stopped, so a reverify
// received meanwhile was lost and the move waited for a verdict forever
// (make e2e's TestSplitReverifyRemoveNodeAsLeastPrivilegedRole, now and
// then). Here the race is taken every run: the test environment runs its
// callbacks in the order they were posted, so the reverify posted when the
// stream's cancellation is reported reaches the move while stopCDC still
// waits for the stream's session to complete.
func TestReverifyWhileTheStreamStopsIsKept(t *testing.T) {
	env, f := newEnv(t)
	env.SetTestTimeout(10 * time.Second)
	f.verify = func(in VerifyInput, n int) (VerifySummary, error) {
		f.awaitStarts(ActivityRunCDC+"/t_m1", n) // as in TestReverifyAfterFailure
		if n == 1 {
			sum := VerifySummary{Rows: 200, Mismatches: 1}
			return sum, temporal.NewNonRetryableApplicationError("1 row differs", ErrTypeVerification, nil, sum)
		}
		return VerifySummary{Passed: true, Rows: 200}, nil
	}
	// The listener and the delayed callback run on the environment's main
	// loop, one at a time.
	var sent, lost bool
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		if info.ActivityType.Name != ActivityRunCDC || sent {
			return
		}
		sent = true
		var st MoveState
		v, err := env.QueryWorkflow(QueryState)
		if err == nil {
			err = v.Get(&st)
		}
		// What the parent sees when it accepts the operator's reverify.
		if err != nil || st.Phase != PhaseVerify || st.Waiting != WaitVerdict || st.Verify == nil || st.Verify.Passed {
			t.Errorf("the stream stopped in %s (waiting %q, verify %+v, query error %v): want VERIFY waiting for the verdict of the failed verify",
				st.Phase, st.Waiting, st.Verify, err)
		}
		env.SignalWorkflow(SignalControl, MoveControl{Op: UpdateReverify})
	})
	// The move ends an hour (GRACE) after its verify; one still running
	// later waits for a verdict it already had: ended by a cancel.
	env.RegisterDelayedCallback(func() {
		lost = true
		env.CancelWorkflow()
	}, 12*time.Hour)
	start := time.Now()
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	t.Logf("ran in %s", time.Since(start).Round(time.Millisecond))
	st := result[MoveState](t, env)
	if !sent {
		t.Fatal("the stream was never cancelled: no reverify was sent")
	}
	if n := f.count(ActivityVerify + "/t_m1"); lost || n != 2 {
		t.Fatalf("the reverify sent while the stream stopped was lost: %d verify runs, the move still waiting 12 h later (ended %s)", n, st.Phase)
	}
	if st.Phase != PhaseDone || st.Verify == nil || !st.Verify.Passed {
		t.Fatalf("move ended %s (verify %+v, error %q), want DONE after a passed reverify", st.Phase, st.Verify, st.Error)
	}
	if in := f.last[ActivityVerify+"/t_m1"].(VerifyInput); in.RunID != "t_m1_v1" {
		t.Fatalf("the reverify ran as %s, want a new run t_m1_v1", in.RunID)
	}
	// Stopped for the verdict, started again by the reverify.
	if n := f.count(ActivityRunCDC + "/t_m1"); n != 2 {
		t.Fatalf("the stream started %d times, want 2", n)
	}
}
