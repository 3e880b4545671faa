package workflows

import (
	"slices"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// recreates records, per PrepareReverse call, whether it asked for the
// reverse slot to be made again.
func recreates(f *fakes) *[]bool {
	var asked []bool
	f.prepareReverse = func(in MoveRef, n int) (JoinResult, error) {
		asked = append(asked, in.RecreateReverse)
		return JoinResult{L0: "0/2000000", Source: &SourceIdentity{SystemID: "9", Timeline: 1, L0: "0/2000000"}}, nil
	}
	return &asked
}

// TestCutoverAfterRepairMakesTheReverseSlotAgain: the first attempt made the
// reverse slot, then met the source's failover; the recovery repaired the
// target. The second attempt's PrepareReverse asks for the slot to be made
// again (the repair's writes carry no origin: GRACE would send them back from
// the old slot's position); the first, with no repair before it, does not.
func TestCutoverAfterRepairMakesTheReverseSlotAgain(t *testing.T) {
	env, f := newEnv(t)
	f.recovered = true
	asked := recreates(f)
	firstCutoverFails(f, failedOver())
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if f.count(ActivityRepair) != 1 || st.Version != 3 {
		t.Fatalf("%d repairs, version %d; want 1 repair and the move cut over (v3)", f.count(ActivityRepair), st.Version)
	}
	if want := []bool{false, true}; !slices.Equal(*asked, want) {
		t.Fatalf("PrepareReverse asked to make the slot again: %v, want %v", *asked, want)
	}
}

// TestCutoverAbortedWithoutRepairKeepsTheReverseSlot: an attempt aborted
// over its budget is followed by no repair; the next attempt keeps the slot
// (making it again waits for the target's running transactions).
func TestCutoverAbortedWithoutRepairKeepsTheReverseSlot(t *testing.T) {
	env, f := newEnv(t)
	asked := recreates(f)
	firstCutoverFails(f, temporal.NewNonRetryableApplicationError("over budget", ErrTypeCutoverAborted, nil))
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if f.count(ActivityRepair) != 0 || st.Version != 3 {
		t.Fatalf("%d repairs, version %d; want none and the move cut over (v3)", f.count(ActivityRepair), st.Version)
	}
	if want := []bool{false, false}; !slices.Equal(*asked, want) {
		t.Fatalf("PrepareReverse asked to make the slot again: %v, want %v", *asked, want)
	}
}

// TestCutoverAfterRepairBeforeTheVersionKeepsTheReverseSlot: a history
// recorded before versionReverseSlotAfterRepair keeps its path.
func TestCutoverAfterRepairBeforeTheVersionKeepsTheReverseSlot(t *testing.T) {
	env, f := newEnv(t)
	f.recovered = true
	env.OnGetVersion(versionReverseSlotAfterRepair, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	asked := recreates(f)
	firstCutoverFails(f, failedOver())
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	result[MoveState](t, env)
	if want := []bool{false, false}; !slices.Equal(*asked, want) {
		t.Fatalf("PrepareReverse asked to make the slot again: %v, want %v", *asked, want)
	}
}
