package workflows

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
)

// A copy slice whose error persists is retried for RetryCopy, then the move
// stops for the operator in SNAPSHOT_COPY with the error and how long it
// lasted (before, the copy was retried without end, nothing said); once
// the cause is gone, resume copies on and the migration ends DONE.
func TestPersistingErrorStopsTheMoveAfterItsDuration(t *testing.T) {
	env, f := newEnv(t)
	var healed atomic.Bool
	copyOK := f.copySlice
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		if in.Move.Spec.ID == "t_m1" && !healed.Load() {
			return CopyProgress{}, temporal.NewApplicationError("connect to shard5: connection refused", "Retryable")
		}
		return copyOK(in, n)
	}
	var start time.Time
	var atStop int
	env.RegisterDelayedCallback(func() { start = env.Now() }, 0)
	// Still retrying short of the limit, nothing stopped.
	env.RegisterDelayedCallback(func() {
		for _, m := range queryState(t, env).Moves {
			if m.Stopped {
				t.Errorf("move %s stopped after %s, before the copy's limit %s: %s", m.Spec.ID, env.Now().Sub(start), RetryCopy, m.Error)
			}
		}
	}, RetryCopy-2*time.Minute)
	var r *resumed
	env.RegisterDelayedCallback(func() {
		atStop = f.count(ActivityCopySlice + "/t_m1")
		healed.Store(true)
		r = resumeStopped(t, env, func(m MoveState) {
			if m.Spec.ID != "t_m1" || m.Phase != PhaseSnapshotCopy {
				t.Errorf("move %s stopped in %s: want t_m1 in SNAPSHOT_COPY, once its copy failed for %s", m.Spec.ID, m.Phase, RetryCopy)
			}
			for _, want := range []string{"stopped in SNAPSHOT_COPY: the copy has failed for 30m", "rounds of 10 attempts; the limit is 30m0s", "connect to shard5: connection refused", "reshard resume t"} {
				if !strings.Contains(m.Error, want) {
					t.Errorf("%s's error %q: want %q in it", m.Spec.ID, m.Error, want)
				}
			}
		})
	}, RetryCopy+time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	r.wantDone(t, env)
	// Rounds of 10 attempts (1 s doubled up to 30 s: about 151 s each),
	// counted from the end of the first: 13 rounds to 30 minutes, and no
	// attempt while the move waited for the operator.
	times := f.times(ActivityCopySlice + "/t_m1")
	if atStop%10 != 0 || atStop/10 < 12 || atStop/10 > 14 {
		t.Errorf("%d attempts before the stop, want 13 rounds of 10", atStop)
	}
	if len(times) > atStop && times[atStop].Sub(times[atStop-1]) < 55*time.Minute {
		t.Errorf("an attempt %s after the last failed one, while the move waited for the operator", times[atStop].Sub(times[atStop-1]))
	}
}

// A verify (an activity next to the stream) that fails for three minutes
// and then passes: retried while its error lasts, and the migration ends
// DONE. Before, the session's five attempts (about 15 s) ran out and the
// move failed.
func TestTransientErrorShorterThanItsDurationIsRetried(t *testing.T) {
	env, f := newEnv(t)
	var until atomic.Int64
	env.RegisterDelayedCallback(func() { until.Store(env.Now().Add(RetryPhase / 2).UnixNano()) }, 0)
	f.verify = func(in VerifyInput, n int) (VerifySummary, error) {
		if in.Move.Spec.ID == "t_m2" && env.Now().UnixNano() < until.Load() {
			return VerifySummary{}, temporal.NewApplicationError("read the snapshot of shard2: connection reset by peer", "Retryable")
		}
		return VerifySummary{Passed: true, Rows: 200}, nil
	}
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if st.Phase != PhaseDone {
		t.Fatalf("migration ended %s (%s), want DONE", st.Phase, st.Error)
	}
	if n := f.count(ActivityVerify + "/t_m2"); n < 10 {
		t.Errorf("t_m2 verified %d times, want the failures of %s retried", n, RetryPhase/2)
	}
}
