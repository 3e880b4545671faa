package workflows

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// gatedRequest asks for the stream during the copy (--stream-during-copy).
func gatedRequest() MigrationRequest {
	r := testRequest()
	r.StreamDuringCopy = true
	return r
}

// delaySlices makes each copy slice take 20 s of the test clock, the copy
// done at the n-th (f.copySlice, which a test may replace after); it
// returns the slices' inputs so far.
func delaySlices(env *testsuite.TestWorkflowEnvironment, f *fakes, n int) func() []CopySliceInput {
	var mu sync.Mutex
	var ins []CopySliceInput
	f.copySlice = func(in CopySliceInput, k int) (CopyProgress, error) {
		return CopyProgress{Rows: 100 * int64(k), Bytes: 1000, Done: k >= n}, nil
	}
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).After(20 * time.Second).Return(
		func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
			mu.Lock()
			ins = append(ins, in)
			mu.Unlock()
			return f.copySlice(in, f.record(ActivityCopySlice+"/"+in.Move.Spec.ID, in))
		})
	return func() []CopySliceInput {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(ins)
	}
}

// TestStreamDuringCopyStartsTheStreamWithTheCopy: with
// StreamDuringCopy the forward stream starts before the first copy slice,
// through the copy gate, in SNAPSHOT_COPY; every slice copies beside it;
// the lag is read after each slice; CDC_CATCH_UP goes on with the same
// stream (one start); the move ends DONE.
func TestStreamDuringCopyStartsTheStreamWithTheCopy(t *testing.T) {
	env, f := newEnv(t)
	copied := delaySlices(env, f, 4)
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: gatedRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if st.Phase != PhaseDone || !st.StreamDuringCopy {
		t.Fatalf("move ended %s (stream during copy %v, error %q), want DONE with the stream during the copy", st.Phase, st.StreamDuringCopy, st.Error)
	}
	starts := f.times(ActivityRunCDC + "/t_m1")
	if len(starts) != 1 {
		t.Fatalf("the stream started %d times, want once: CDC_CATCH_UP goes on with the copy's stream", len(starts))
	}
	slices := f.times(ActivityCopySlice + "/t_m1")
	if len(slices) != 4 || starts[0].After(slices[0]) {
		t.Fatalf("stream started at %s, copy slices at %v: want the stream first, then 4 slices", starts[0], slices)
	}
	in := f.last[ActivityRunCDC+"/t_m1"].(CDCInput)
	if !in.CopyGate || in.Phase != PhaseSnapshotCopy || in.L0 != "0/16B3748" {
		t.Fatalf("stream input %+v: want the copy gate, SNAPSHOT_COPY and the slot's L0", in)
	}
	for i, c := range copied() {
		if !c.StreamDuringCopy {
			t.Fatalf("copy slice %d not beside the stream: %+v", i+1, c)
		}
	}
	// The lag was read after every slice (the copy's 4) and in CDC_CATCH_UP.
	if n := f.count(ActivityCDCStatus); n < 5 {
		t.Fatalf("CDCStatus asked %d times, want after each of 4 slices and in CDC_CATCH_UP", n)
	}
}

// TestStreamDuringCopyVersionGate: a run that took the old branch of the
// version (a history recorded before it) streams after the copy, as
// without the flag.
func TestStreamDuringCopyVersionGate(t *testing.T) {
	env, f := newEnv(t)
	delaySlices(env, f, 3)
	env.OnGetVersion(versionStreamDuringCopy, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: gatedRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if st.Phase != PhaseDone || st.StreamDuringCopy {
		t.Fatalf("move ended %s, stream during copy %v: want DONE, the stream after the copy", st.Phase, st.StreamDuringCopy)
	}
	starts, slices := f.times(ActivityRunCDC+"/t_m1"), f.times(ActivityCopySlice+"/t_m1")
	if len(starts) != 1 || starts[0].Before(slices[len(slices)-1]) {
		t.Fatalf("stream started at %v, copy slices at %v: want one stream after the last slice", starts, slices)
	}
}

// TestStreamDuringCopyRestartsAKilledStream: the stream's worker dies
// during the copy (the session's stream ends 30 s in): the next slice
// starts it again in a new session, still in SNAPSHOT_COPY, through the
// gate and from the slot's L0 (it resumes from the target's origin).
func TestStreamDuringCopyRestartsAKilledStream(t *testing.T) {
	env, f := newEnv(t)
	delaySlices(env, f, 5)
	f.cdcLife = func(n int) time.Duration {
		if n == 1 {
			return 30 * time.Second
		}
		return 10000 * time.Hour
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: gatedRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if st.Phase != PhaseDone {
		t.Fatalf("move ended %s (error %q)", st.Phase, st.Error)
	}
	starts, cp := f.times(ActivityRunCDC+"/t_m1"), f.times(ActivityCopySlice+"/t_m1")
	if len(starts) != 2 || !starts[1].Before(cp[len(cp)-1]) {
		t.Fatalf("stream started at %v, copy slices at %v: want a restart during the copy", starts, cp)
	}
	if in := f.last[ActivityRunCDC+"/t_m1"].(CDCInput); !in.CopyGate || in.Phase != PhaseSnapshotCopy || in.L0 != "0/16B3748" {
		t.Fatalf("restarted stream %+v: want the gate, SNAPSHOT_COPY, the slot's L0", in)
	}
}

// TestRollbackDuringStreamedCopy: a rollback asked during a copy beside
// its stream stops the stream (its activity cancelled and ended) before
// the rollback's activity drops the slot and the copied rows.
func TestRollbackDuringStreamedCopy(t *testing.T) {
	env, f := newEnv(t)
	delaySlices(env, f, 10)
	var mu sync.Mutex
	var events []string
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, "cancel "+info.ActivityType.Name)
	})
	f.rollback = func(EndInput, int) (CleanupResult, error) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, "rollback")
		return CleanupResult{RowsDeleted: 50}, nil
	}
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalControl, MoveControl{Op: UpdateRollback})
	}, 50*time.Second)
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: gatedRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if st.Phase != PhaseRolledBack {
		t.Fatalf("move ended %s (error %q), want ROLLED_BACK", st.Phase, st.Error)
	}
	if got := phasesOf(st); !slices.Contains(got, PhaseSnapshotCopy) || slices.Contains(got, PhaseCDCCatchUp) {
		t.Fatalf("phases %v: want the rollback from SNAPSHOT_COPY", got)
	}
	mu.Lock()
	defer mu.Unlock()
	i, j := slices.Index(events, "cancel "+ActivityRunCDC), slices.Index(events, "rollback")
	if i < 0 || j < 0 || i > j {
		t.Fatalf("events %v: want the stream cancelled before the rollback", events)
	}
}

// TestSourceFailoverDuringStreamedCopy: the source fails over during a
// copy beside its stream: the slot is created again, the rest of the copy
// runs without the stream, the moving ranges are repaired after it, and
// only then does the stream start, from the new slot.
func TestSourceFailoverDuringStreamedCopy(t *testing.T) {
	env, f := newEnv(t)
	f.recovered = true
	delaySlices(env, f, 5)
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		if n == 2 {
			return CopyProgress{}, failedOver()
		}
		return CopyProgress{Rows: 100 * int64(n), Bytes: 1000, Done: n >= 5}, nil
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: gatedRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	checkRecovered(t, f, st, PhaseSnapshotCopy)
	if st.StreamDuringCopy {
		t.Fatal("the move still says its stream runs during the copy after the failover moved it after")
	}
	starts, cp := f.times(ActivityRunCDC+"/t_m1"), f.times(ActivityCopySlice+"/t_m1")
	repaired := f.times(ActivityRepair)[0]
	last := starts[len(starts)-1]
	if len(starts) != 2 || last.Before(cp[len(cp)-1]) || last.Before(repaired) {
		t.Fatalf("streams started at %v, copy slices at %v, repair at %s: want the gated stream, then one after the copy and the repair", starts, cp, repaired)
	}
}
