package workflows

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
)

// graceOf is the GRACE phase of a move that walked every phase to DONE, and
// the CLEANUP phase after it.
func graceOf(t *testing.T, st MoveState) (grace, cleanup PhaseTiming) {
	t.Helper()
	want := []Phase{PhasePlan, PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify, PhaseCutover, PhaseGrace, PhaseCleanup}
	if got := phasesOf(st); st.Phase != PhaseDone || !equal(got, want) {
		t.Fatalf("move ended %s, walked %v, want DONE through %v", st.Phase, got, want)
	}
	return st.Timings[6], st.Timings[7]
}

// An explicit grace period of 0 cleans up right after the cutover: GRACE
// ends the moment it starts (no timer) and no reverse stream is started.
func TestZeroGraceCleansUpAtOnce(t *testing.T) {
	env, f := newEnv(t)
	req := testRequest()
	req.GracePeriod = new(time.Duration(0))
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: req, Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	grace, cleanup := graceOf(t, st)
	if d := grace.End.Sub(grace.Start); d != 0 {
		t.Errorf("GRACE lasted %s with a grace period of 0, want no wait", d)
	}
	if at := f.times(ActivityCleanup); len(at) != 1 || !at[0].Equal(grace.Start) || !cleanup.Start.Equal(grace.Start) {
		t.Errorf("cleanup ran at %v, GRACE started %s, CLEANUP started %s: want one cleanup right at the cutover's end", at, grace.Start, cleanup.Start)
	}
	if n := f.count(ActivityRunReverse); n != 0 {
		t.Errorf("reverse stream started %d times with no grace period, want 0", n)
	}
}

// An unset grace period waits DefaultGracePeriod, with the reverse stream
// running meanwhile.
func TestUnsetGraceWaitsTheDefault(t *testing.T) {
	env, f := newEnv(t)
	req := testRequest()
	req.GracePeriod = nil
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: req, Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	grace, _ := graceOf(t, st)
	if d := grace.End.Sub(grace.Start); d != DefaultGracePeriod {
		t.Errorf("GRACE lasted %s with no grace period set, want the default %s", d, DefaultGracePeriod)
	}
	if n := f.count(ActivityRunReverse); n != 1 {
		t.Errorf("reverse stream started %d times, want 1", n)
	}
}

// With no grace period, a rollback asked while the cutover ran still rolls
// back (the reverse cutover over the reverse slot), without a GRACE stream.
func TestZeroGraceRollbackAskedDuringCutover(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCutover, mock.Anything, mock.Anything).After(time.Hour).Return(
		func(ctx context.Context, in CutoverInput) (CutoverResult, error) {
			return f.cutover(in, f.record(ActivityCutover+"/"+in.Move.Spec.ID, in))
		})
	env.RegisterDelayedCallback(func() {
		var st MoveState
		if v, err := env.QueryWorkflow(QueryState); err != nil || v.Get(&st) != nil || st.Phase != PhaseCutover {
			t.Errorf("rollback asked in %s (query error %v), want CUTOVER", st.Phase, err)
		}
		env.SignalWorkflow(SignalControl, MoveControl{Op: UpdateRollback})
	}, 50*time.Minute) // the cutover starts within minutes and takes an hour
	req := testRequest()
	req.GracePeriod = new(time.Duration(0))
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: req, Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	want := []Phase{PhasePlan, PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify, PhaseCutover, PhaseGrace, PhaseRollingBack}
	if got := phasesOf(st); st.Phase != PhaseRolledBack || !equal(got, want) {
		t.Fatalf("move ended %s, walked %v, want ROLLED_BACK through %v", st.Phase, got, want)
	}
	if in, ok := f.last[ActivityRollback].(EndInput); !ok || !in.Grace || in.ReverseL0 != "0/2000000" {
		t.Fatalf("rollback input %+v, want the reverse cutover from the reverse slot's L0", f.last[ActivityRollback])
	}
	if f.count(ActivityRunReverse) != 0 || f.count(ActivityCleanup) != 0 {
		t.Fatalf("reverse streams %d, cleanups %d; want none", f.count(ActivityRunReverse), f.count(ActivityCleanup))
	}
}

// A request that omits grace_period (every request recorded when 0 was
// written as nothing) reads as the default; an explicit 0 stays 0.
func TestGracePeriodJSON(t *testing.T) {
	for _, tc := range []struct {
		json string
		want time.Duration
	}{
		{`{"id":"a"}`, DefaultGracePeriod},
		{`{"id":"a","grace_period":8000000000}`, 8 * time.Second},
		{`{"id":"a","grace_period":0}`, 0},
	} {
		var r MigrationRequest
		if err := json.Unmarshal([]byte(tc.json), &r); err != nil {
			t.Fatal(err)
		}
		if r.Grace() != tc.want {
			t.Errorf("%s: grace %s, want %s", tc.json, r.Grace(), tc.want)
		}
	}
	b, err := json.Marshal(MigrationRequest{ID: "a", GracePeriod: new(time.Duration(0))})
	if err != nil || !strings.Contains(string(b), `"grace_period":0`) {
		t.Errorf("explicit 0 encodes as %s (%v), want grace_period 0", b, err)
	}
}

// A move answers the throttle it has in force: the request's, then the
// operator's change (a running verify, CLEANUP or rollback asks it).
func TestMoveAnswersItsThrottle(t *testing.T) {
	env, _ := newEnv(t)
	req := testRequest()
	req.Throttle = Throttle{RowsPerSec: 500}
	changed := Throttle{RowsPerSec: 2000, Adaptive: &AdaptiveThrottle{MaxActiveBackends: 8}}
	ask := func() Throttle {
		var th Throttle
		v, err := env.QueryWorkflow(QueryThrottle)
		if err != nil || v.Get(&th) != nil {
			t.Errorf("query %s: %v", QueryThrottle, err)
		}
		return th
	}
	env.RegisterDelayedCallback(func() {
		if got := ask(); got.RowsPerSec != 500 || got.Adaptive != nil {
			t.Errorf("throttle in force %+v, want the request's 500 rows/s", got)
		}
		env.SignalWorkflow(SignalControl, MoveControl{Op: UpdateThrottle, Throttle: &changed})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		if got := ask(); got.RowsPerSec != 2000 || got.Adaptive == nil || got.Adaptive.MaxActiveBackends != 8 {
			t.Errorf("throttle in force %+v after the change, want %+v", got, changed)
		}
	}, 2*time.Second)
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: req, Spec: testPlan().Moves[0]})
	result[MoveState](t, env)
}
