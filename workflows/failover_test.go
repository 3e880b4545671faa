package workflows

import (
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
)

func failedOver() error {
	return temporal.NewNonRetryableApplicationError("source shard1 failed over (timeline 1 → 2, slot reshard_t_m1 missing): the changes since 0/16B3748 may be missing on the target; repair needed", ErrTypeFailedOver, nil)
}

func checkRecovered(t *testing.T, f *fakes, st MoveState, phase Phase) {
	t.Helper()
	if st.Phase != PhaseDone || st.Stopped {
		t.Fatalf("move ended %s (stopped %v, error %q), want DONE with no operator action", st.Phase, st.Stopped, st.Error)
	}
	if f.count(ActivityRecoverSource) != 1 || f.count(ActivityRepair) != 1 {
		t.Fatalf("recoveries %d, repairs %d; want 1 and 1", f.count(ActivityRecoverSource), f.count(ActivityRepair))
	}
	// The stream starts from the new slot, after the repair, and compares
	// the source with the new primary.
	in := f.last[ActivityRunCDC+"/t_m1"].(CDCInput)
	if in.L0 != "0/3000000" || in.Move.Source == nil || in.Move.Source.Timeline != 2 {
		t.Fatalf("stream after the recovery: L0 %s, source %+v; want the new slot's 0/3000000 on timeline 2", in.L0, in.Move.Source)
	}
	repaired := f.times(ActivityRepair)[0]
	for i, at := range f.times(ActivityRunCDC + "/t_m1") {
		if i == len(f.times(ActivityRunCDC+"/t_m1"))-1 && at.Before(repaired) {
			t.Fatalf("the last stream started at %s, before the repair at %s", at, repaired)
		}
	}
	if len(st.Failovers) != 1 {
		t.Fatalf("failovers: %+v, want one", st.Failovers)
	}
	e := st.Failovers[0]
	if e.Side != "source" || e.Shard != "shard1" || e.Phase != phase || e.FromTimeline != 1 || e.ToTimeline != 2 || !e.Repaired || e.Chunks != 8 || e.ChunksRepaired != 2 || e.RowsCopied != 14 {
		t.Fatalf("failover event %+v", e)
	}
	t.Log(e.String())
}

// TestSourceFailoverInCatchUpRecovers: a stream that ends with a source
// failover in CDC_CATCH_UP does not stop the move: the slot is created
// again on the new primary, the moving ranges repaired, the stream started
// from the new slot, and the move goes on to DONE.
func TestSourceFailoverInCatchUpRecovers(t *testing.T) {
	env, f := newEnv(t)
	f.recovered = true
	f.cdcLife = func(n int) time.Duration {
		if n == 1 {
			return time.Minute
		}
		return 10000 * time.Hour
	}
	f.cdcEnd = func(n int) error {
		if n == 1 {
			return failedOver()
		}
		return nil
	}
	f.lag = func(n int) int64 {
		if n < 60 {
			return 1 << 40
		}
		return 0
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	checkRecovered(t, f, st, PhaseCDCCatchUp)
}

// TestSourceFailoverInCopyRecovers: a copy slice that meets a source
// failover: the slot is created again, the copy goes on from its
// checkpoints, and the repair runs once it is done, before the first stream.
func TestSourceFailoverInCopyRecovers(t *testing.T) {
	env, f := newEnv(t)
	f.recovered = true
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		if n == 2 {
			return CopyProgress{}, failedOver()
		}
		return CopyProgress{Rows: 100 * int64(n), Bytes: 1000, Done: n >= 3}, nil
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	checkRecovered(t, f, st, PhaseSnapshotCopy)
	slices := f.times(ActivityCopySlice + "/t_m1")
	if len(slices) != 3 || f.times(ActivityRepair)[0].Before(slices[2]) {
		t.Fatalf("copy slices at %v, repair at %v: want the copy to finish first", slices, f.times(ActivityRepair))
	}
	if n := f.count(ActivityRunCDC + "/t_m1"); n != 1 {
		t.Fatalf("%d streams, want 1 (from the new slot)", n)
	}
}

// TestFailedOverWithoutSourceFailoverStops: when RecoverSource finds the
// source did not fail over (the failover was elsewhere), the move stops for
// the operator as before.
func TestFailedOverWithoutSourceFailoverStops(t *testing.T) {
	env, f := newEnv(t)
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) { return CopyProgress{}, failedOver() }
	var st MoveState
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryState)
		if err == nil {
			err = v.Get(&st)
		}
		if err != nil {
			t.Error(err)
		}
		env.CancelWorkflow()
	}, time.Hour)
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	if !st.Stopped || st.Phase != PhaseSnapshotCopy || f.count(ActivityRepair) != 0 || len(st.Failovers) != 0 {
		t.Fatalf("state %s stopped %v failovers %v repairs %d: want stopped in SNAPSHOT_COPY, nothing repaired", st.Phase, st.Stopped, st.Failovers, f.count(ActivityRepair))
	}
}

// TestSourceFailoverInVerifyRecovers: a verify that meets a source failover
// (its stream ended FailedOver): new slot, repair, then a new verify run
// with the stream from the new slot.
func TestSourceFailoverInVerifyRecovers(t *testing.T) {
	env, f := newEnv(t)
	f.recovered = true
	f.verify = func(in VerifyInput, n int) (VerifySummary, error) {
		if n == 1 {
			return VerifySummary{}, failedOver()
		}
		return VerifySummary{Passed: true, Rows: 200}, nil
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	checkRecovered(t, f, st, PhaseVerify)
	if in := f.last[ActivityVerify+"/t_m1"].(VerifyInput); in.RunID != "t_m1_v1" || f.times(ActivityVerify + "/t_m1")[1].Before(f.times(ActivityRepair)[0]) {
		t.Fatalf("verify after the recovery: run %s at %v, repair at %v; want a new run after the repair", in.RunID, f.times(ActivityVerify+"/t_m1"), f.times(ActivityRepair))
	}
}
