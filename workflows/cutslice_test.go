package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
)

// slowSlices mocks CopySlice as a slow throttled slice: the first slice of
// each move runs for hold of real time, the others end at once, the third
// done. The test environment settles a cancelled activity's future at once
// (a CanceledError without details) and does not wait for the activity, so
// the cancellations are recorded by the listener; that the rollback waits
// for the cut slice to stop (waitOpts) and that the cut slice reports its
// rows are checked against a real server (cmd/reshard
// TestActionsAgainstWorker).
type slowSlices struct {
	mu  sync.Mutex
	cut map[string]time.Time // move → when its slice was cancelled
}

func (s *slowSlices) mock(env *testsuite.TestWorkflowEnvironment, f *fakes, hold time.Duration) func(context.Context, CopySliceInput) (CopyProgress, error) {
	s.cut = map[string]time.Time{}
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		if info.ActivityType.Name == ActivityCopySlice {
			s.mu.Lock()
			s.cut[info.WorkflowExecution.ID] = time.Now()
			s.mu.Unlock()
		}
	})
	return func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
		n := f.record(ActivityCopySlice+"/"+in.Move.Spec.ID, in)
		if n > 1 {
			return CopyProgress{Rows: 100 * int64(n), Done: n >= 3}, nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		return CopyProgress{Rows: 100}, nil
	}
}

// cutOf is when the copy slice of move id was cancelled.
func (s *slowSlices) cutOf(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.cut[MoveWorkflowID(MigrationWorkflowID("t"), id)]
	return at, ok
}

// A pause takes effect at once: it cancels the running copy slice instead
// of waiting for its end (CopySlice, 20 s by default), no slice runs while
// paused, and the copy goes on after resume. Before versionPauseCutsSlice
// the slice ran its whole time (here 1.5 s of real time, then the test fails).
func TestPauseCutsTheCopySlice(t *testing.T) {
	env, f := newEnv(t)
	var s slowSlices
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).Return(s.mock(env, f, 1500*time.Millisecond))
	var pErr, rErr error
	var pDone, rDone bool
	var paused MigrationState
	var pausedAt time.Time
	// The slices run in real time; the test clock follows it while they run.
	env.RegisterDelayedCallback(func() { pausedAt = time.Now(); update(env, UpdatePause, &pErr, &pDone) }, 300*time.Millisecond)
	env.RegisterDelayedCallback(func() { paused = queryState(t, env) }, time.Hour)
	env.RegisterDelayedCallback(func() { update(env, UpdateResume, &rErr, &rDone) }, 2*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if pErr != nil || rErr != nil || !pDone || !rDone || st.Phase != PhaseDone {
		t.Fatalf("pause %v/%v resume %v/%v, migration %s", pDone, pErr, rDone, rErr, st.Phase)
	}
	for _, id := range []string{"t_m1", "t_m2"} {
		at, ok := s.cutOf(id)
		if !ok {
			t.Fatalf("move %s: the pause did not cancel the running copy slice (it ran its whole time)", id)
		}
		if d := at.Sub(pausedAt); d > time.Second {
			t.Errorf("move %s: the slice was cancelled %s after the pause", id, d)
		}
		if n := f.count(ActivityCopySlice + "/" + id); n != 3 {
			t.Errorf("move %s: %d slices, want 3 (the cut one, two after resume)", id, n)
		}
	}
	for _, m := range paused.Moves {
		if !m.Paused || m.Phase != PhaseSnapshotCopy || f.count(ActivityCopySlice+"/"+m.Spec.ID) > 3 {
			t.Errorf("while paused, move %s: paused %v, %s", m.Spec.ID, m.Paused, m.Phase)
		}
	}
	if len(paused.Moves) != 2 {
		t.Errorf("while paused, %d moves", len(paused.Moves))
	}
}

// A rollback cancels the running copy slice too.
func TestRollbackCutsTheCopySlice(t *testing.T) {
	env, f := newEnv(t)
	var s slowSlices
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).Return(s.mock(env, f, 1500*time.Millisecond))
	var upErr error
	var upDone bool
	var askedAt time.Time
	env.RegisterDelayedCallback(func() { askedAt = time.Now(); update(env, UpdateRollback, &upErr, &upDone) }, 300*time.Millisecond)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !upDone || upErr != nil || st.Phase != PhaseRolledBack {
		t.Fatalf("rollback %v/%v, migration %s", upDone, upErr, st.Phase)
	}
	for _, id := range []string{"t_m1", "t_m2"} {
		at, ok := s.cutOf(id)
		if !ok {
			t.Errorf("move %s: the rollback did not cancel the running copy slice (it ran its whole time)", id)
		} else if d := at.Sub(askedAt); d > time.Second {
			t.Errorf("move %s: the slice was cancelled %s after the rollback", id, d)
		}
		if n := f.count(ActivityCopySlice + "/" + id); n != 1 {
			t.Errorf("move %s: %d slices, want the cut one only", id, n)
		}
	}
	if n := f.count(ActivityRollback); n != 2 {
		t.Fatalf("%d rollback activities, want 2", n)
	}
}
