package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// fakes are the mocked activities of a workflow test; tests replace the
// functions they care about. Every call is recorded with the test clock.
type fakes struct {
	env *testsuite.TestWorkflowEnvironment

	mu    sync.Mutex
	calls map[string][]time.Time
	last  map[string]any

	copySlice func(CopySliceInput, int) (CopyProgress, error)
	cdcLife   func(n int) time.Duration // how long the n-th stream runs before it fails
	cdcEnd    func(n int) error         // how the n-th stream fails (nil: a retryable lost connection)
	lag       func(n int) int64
	verify    func(VerifyInput, int) (VerifySummary, error)
	cutover   func(CutoverInput, int) (CutoverResult, error)
	// prepareReverse, when set, answers the n-th PrepareReverse.
	prepareReverse func(MoveRef, int) (JoinResult, error)
	// recovered: RecoverSource finds the source failed over (failover_test.go).
	recovered bool
	// revLife and revEnd: how long the n-th reverse stream runs and how it
	// ends (nil: 10000 h, then a plain error); rollback answers the n-th
	// Rollback (nil: done); reverseRecovered: RecoverReverse finds the new
	// owner failed over (failover_test.go).
	revLife          func(n int) time.Duration
	revEnd           func(n int) error
	rollback         func(EndInput, int) (CleanupResult, error)
	reverseRecovered bool
}

func (f *fakes) record(name string, in any) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[name] = append(f.calls[name], f.env.Now())
	f.last[name] = in
	return len(f.calls[name])
}

func (f *fakes) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls[name])
}

// awaitStarts waits (up to 5 s of real time) until activity name has
// started n times, for a fake that runs beside it: an activity the workflow
// cancels before the test environment has run it is never started (its
// Execute finds no handle and returns canceled), so a stream scheduled
// just before a quick cutover may never be seen to start.
func (f *fakes) awaitStarts(name string, n int) {
	for deadline := time.Now().Add(5 * time.Second); f.count(name) < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

func (f *fakes) times(name string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls[name]...)
}

var testRanges = []ring.Range{{Lo: -100, Hi: 0}, {Lo: 1000, Hi: 2000}}

func testPlan() PlanResult {
	return PlanResult{FromVersion: 1, MovedFraction: 0.2, Moves: []MoveSpec{
		{ID: "t_m1", Source: "shard1", Target: "shard5", Ranges: testRanges[:1], EstRows: 200},
		{ID: "t_m2", Source: "shard2", Target: "shard5", Ranges: testRanges[1:], EstRows: 200},
	}}
}

func testRequest() MigrationRequest {
	return MigrationRequest{ID: "t", Kind: KindAddNode, Shard: "shard5",
		Tables:      tableset.Spec{Name: "users", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}},
		GracePeriod: new(time.Hour), CopySlice: time.Minute}
}

func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *fakes) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// The race detector on a busy 2-core machine slows the tasks of the
	// 128-move runs past the SDK's default 1 s deadlock check (seen at a
	// load average of 13); a real deadlock still fails, 10 s later.
	env.SetWorkerOptions(worker.Options{EnableSessionWorker: true, DeadlockDetectionTimeout: 10 * time.Second})
	env.SetTestTimeout(30 * time.Second)
	Register(env)
	f := &fakes{env: env, calls: map[string][]time.Time{}, last: map[string]any{}}
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		return CopyProgress{Rows: 100 * int64(n), Bytes: 1000, Done: n >= 2}, nil
	}
	f.cdcLife = func(int) time.Duration { return 10000 * time.Hour }
	f.lag = func(int) int64 { return 10 }
	f.verify = func(VerifyInput, int) (VerifySummary, error) { return VerifySummary{Passed: true, Rows: 200}, nil }
	f.cutover = func(CutoverInput, int) (CutoverResult, error) {
		return CutoverResult{WritePause: 40 * time.Millisecond, Version: 3, PauseSteps: []PauseStep{{"drain", 30 * time.Millisecond}, {"publish", 10 * time.Millisecond}}}, nil
	}
	reg := func(name string, fn any) {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	reg(ActivityPlan, func(ctx context.Context, req MigrationRequest) (PlanResult, error) {
		f.record(ActivityPlan, req)
		return testPlan(), nil
	})
	reg(ActivityPublishMigrating, func(ctx context.Context, in PublishInput) (int64, error) {
		f.record(ActivityPublishMigrating, in)
		return 2, nil
	})
	reg(ActivityPublishStable, func(ctx context.Context, in PublishInput) (int64, error) {
		f.record(ActivityPublishStable, in)
		return 9, nil
	})
	reg(ActivityPreflightMove, func(ctx context.Context, in MoveRef) error { f.record(ActivityPreflightMove, in); return nil })
	reg(ActivityJoin, func(ctx context.Context, in MoveRef) (JoinResult, error) {
		f.record(ActivityJoin, in)
		return JoinResult{L0: "0/16B3748", Source: &SourceIdentity{SystemID: "7", Timeline: 1, L0: "0/16B3748"}, Target: &SourceIdentity{SystemID: "9", Timeline: 1}}, nil
	})
	reg(ActivityCopySlice, func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
		return f.copySlice(in, f.record(ActivityCopySlice+"/"+in.Move.Spec.ID, in))
	})
	// The streams block on the test clock (After), so that the clock can
	// skip ahead while they run, and end only when cancelled or their time
	// is up (then with an error, as a real stream that stopped).
	reg(ActivityRunCDC, func(ctx context.Context, in CDCInput) error { return errors.New("mocked") })
	reg(ActivityRunReverse, func(ctx context.Context, in CDCInput) error { return errors.New("mocked") })
	reg(ActivityCDCStatus, func(ctx context.Context, in MoveRef) (CDCStatus, error) {
		return CDCStatus{LagBytes: f.lag(f.record(ActivityCDCStatus, in))}, nil
	})
	reg(ActivityVerify, func(ctx context.Context, in VerifyInput) (VerifySummary, error) {
		return f.verify(in, f.record(ActivityVerify+"/"+in.Move.Spec.ID, in))
	})
	reg(ActivityPrepareReverse, func(ctx context.Context, in MoveRef) (JoinResult, error) {
		n := f.record(ActivityPrepareReverse, in)
		if f.prepareReverse != nil {
			return f.prepareReverse(in, n)
		}
		return JoinResult{L0: "0/2000000", Source: &SourceIdentity{SystemID: "9", Timeline: 1, L0: "0/2000000"}}, nil
	})
	reg(ActivityCutover, func(ctx context.Context, in CutoverInput) (CutoverResult, error) {
		return f.cutover(in, f.record(ActivityCutover+"/"+in.Move.Spec.ID, in))
	})
	reg(ActivityStopForward, func(ctx context.Context, in MoveRef) error { f.record(ActivityStopForward, in); return nil })
	reg(ActivityCleanup, func(ctx context.Context, in EndInput) (CleanupResult, error) {
		f.record(ActivityCleanup, in)
		return CleanupResult{RowsDeleted: 200}, nil
	})
	reg(ActivityRollback, func(ctx context.Context, in EndInput) (CleanupResult, error) {
		n := f.record(ActivityRollback, in)
		if f.rollback != nil {
			return f.rollback(in, n)
		}
		return CleanupResult{RowsDeleted: 200}, nil
	})
	reg(ActivityRecoverReverse, func(ctx context.Context, in MoveRef) (RecoverSourceResult, error) {
		f.record(ActivityRecoverReverse, in)
		if !f.reverseRecovered {
			return RecoverSourceResult{}, nil
		}
		return RecoverSourceResult{L0: "0/5000000", Source: &SourceIdentity{SystemID: "9", Timeline: 2, L0: "0/5000000"}}, nil
	})
	reg(ActivityRecoverSource, func(ctx context.Context, in MoveRef) (RecoverSourceResult, error) {
		f.record(ActivityRecoverSource, in)
		if !f.recovered {
			return RecoverSourceResult{}, nil
		}
		return RecoverSourceResult{L0: "0/3000000", Source: &SourceIdentity{SystemID: "7", Timeline: 2, L0: "0/3000000"}}, nil
	})
	reg(ActivityRepair, func(ctx context.Context, in RepairInput) (RepairResult, error) {
		f.record(ActivityRepair, in)
		return RepairResult{Chunks: 8, Repaired: 2, RowsCopied: 14, RowsDeleted: 1}, nil
	})
	var cdcStarts int
	env.OnActivity(ActivityRunCDC, mock.Anything, mock.Anything).AfterFn(func() time.Duration {
		f.mu.Lock()
		cdcStarts++
		n := cdcStarts
		f.mu.Unlock()
		return f.cdcLife(n)
	}).Return(func(ctx context.Context, in CDCInput) error {
		f.mu.Lock()
		n := cdcStarts
		f.mu.Unlock()
		if f.cdcEnd != nil {
			if err := f.cdcEnd(n); err != nil {
				return err
			}
		}
		return temporal.NewApplicationError("stream of "+in.Move.Spec.ID+" ended: connection lost", "Retryable")
	})
	var revStarts int
	env.OnActivity(ActivityRunReverse, mock.Anything, mock.Anything).AfterFn(func() time.Duration {
		f.mu.Lock()
		revStarts++
		n := revStarts
		f.mu.Unlock()
		if f.revLife != nil {
			return f.revLife(n)
		}
		return 10000 * time.Hour
	}).Return(func(ctx context.Context, in CDCInput) error {
		f.mu.Lock()
		n := revStarts
		f.mu.Unlock()
		if f.revEnd != nil {
			if err := f.revEnd(n); err != nil {
				return err
			}
		}
		return errors.New("reverse stream ended")
	})
	// The streams are recorded when they start.
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		switch info.ActivityType.Name {
		case ActivityRunCDC, ActivityRunReverse:
			var in CDCInput
			if err := args.Get(&in); err != nil {
				t.Error(err)
			}
			name := info.ActivityType.Name
			if name == ActivityRunCDC {
				name += "/" + in.Move.Spec.ID
			}
			f.record(name, in)
		}
	})
	return env, f
}

func result[T any](t *testing.T, env *testsuite.TestWorkflowEnvironment) T {
	t.Helper()
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	var out T
	if err := env.GetWorkflowError(); err != nil {
		if err := Outcome(err, &out); err != nil {
			t.Fatalf("workflow error: %v", err)
		}
		return out
	}
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// queryState is the migration's state query, from a delayed callback: a
// failure is reported (t.Error) and leaves the state empty.
func queryState(t *testing.T, env *testsuite.TestWorkflowEnvironment) MigrationState {
	t.Helper()
	var st MigrationState
	v, err := env.QueryWorkflow(QueryState)
	if err != nil {
		t.Errorf("query: %v", err)
		return st
	}
	if err := v.Get(&st); err != nil {
		t.Error(err)
	}
	return st
}

func phasesOf(ms MoveState) []Phase {
	var ps []Phase
	for _, t := range ms.Timings {
		ps = append(ps, t.Phase)
	}
	return ps
}

func TestHappyPathToDone(t *testing.T) {
	env, f := newEnv(t)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if st.Phase != PhaseDone || st.Version != 9 || st.FromVersion != 1 || st.MovedFraction != 0.2 {
		t.Fatalf("migration ended %s v%d (from v%d, moved %.2f), want DONE v9 from v1", st.Phase, st.Version, st.FromVersion, st.MovedFraction)
	}
	want := []Phase{PhasePlan, PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify, PhaseCutover, PhaseGrace, PhaseCleanup}
	for _, m := range st.Moves {
		if m.Phase != PhaseDone || m.RowsCopied != 200 || !m.CopyDone || m.WritePause != 40*time.Millisecond || m.Verify == nil || !m.Verify.Passed {
			t.Fatalf("move %s: %+v", m.Spec.ID, m)
		}
		if got := PauseStepsText(m.PauseSteps); got != "drain 30ms, publish 10ms" {
			t.Fatalf("move %s: pause steps %q, want the cutover's", m.Spec.ID, got)
		}
		if got := phasesOf(m); !equal(got, want) {
			t.Fatalf("move %s walked %v, want %v", m.Spec.ID, got, want)
		}
	}
	if n := f.count(ActivityPublishStable); n != 1 {
		t.Fatalf("PublishStable called %d times", n)
	}
	if in := f.last[ActivityPublishStable].(PublishInput); len(in.RolledBack) != 0 || len(in.Moves) != 2 {
		t.Fatalf("PublishStable input %+v", in)
	}
	// The forward stream ran once per move, from the slot's L0, and the
	// reverse stream from the reverse slot's L0.
	for _, id := range []string{"t_m1", "t_m2"} {
		if n := f.count(ActivityRunCDC + "/" + id); n != 1 {
			t.Fatalf("CDC of %s started %d times, want 1", id, n)
		}
	}
	if in := f.last[ActivityRunReverse].(CDCInput); in.L0 != "0/2000000" || !in.Reverse {
		t.Fatalf("reverse stream input %+v", in)
	}
	// Copy started after JOINING, CDC after the copy (the ordering rule).
	if cdc, cp := f.times(ActivityRunCDC + "/t_m1")[0], f.times(ActivityCopySlice+"/t_m1"); cdc.Before(cp[len(cp)-1]) {
		t.Fatalf("CDC started at %s, before the last copy slice at %s", cdc, cp[len(cp)-1])
	}
}

func equal(a, b []Phase) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var updates int

// update sends an Update and returns its outcome once the workflow has
// decided it.
func update(env *testsuite.TestWorkflowEnvironment, name string, out *error, done *bool, args ...any) {
	updates++
	env.UpdateWorkflow(name, fmt.Sprintf("u%d-%s", updates, name), &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { *out = err; *done = true },
		OnComplete: func(_ interface{}, err error) { *out = err; *done = true },
	}, args...)
}

func TestVerifyFailureThenRollbackByUpdate(t *testing.T) {
	env, f := newEnv(t)
	f.verify = func(in VerifyInput, _ int) (VerifySummary, error) {
		sum := VerifySummary{Passed: false, Rows: 200, Mismatches: 3, Samples: []string{"missing users key=[42]"}}
		return sum, temporal.NewNonRetryableApplicationError("3 rows differ", ErrTypeVerification, nil, sum)
	}
	var upErr error
	var upDone bool
	env.RegisterDelayedCallback(func() {
		st := queryState(t, env)
		for _, m := range st.Moves {
			if m.Phase != PhaseVerify || m.Verify == nil || m.Verify.Passed || m.Verify.Mismatches != 3 {
				t.Errorf("before the rollback, move %s: phase %s verify %+v", m.Spec.ID, m.Phase, m.Verify)
			}
		}
		update(env, UpdateRollback, &upErr, &upDone)
	}, 3*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !upDone || upErr != nil {
		t.Fatalf("rollback update: done=%v err=%v", upDone, upErr)
	}
	if st.Phase != PhaseRolledBack {
		t.Fatalf("migration ended %s, want ROLLED_BACK", st.Phase)
	}
	for _, m := range st.Moves {
		if m.Phase != PhaseRolledBack {
			t.Fatalf("move %s ended %s", m.Spec.ID, m.Phase)
		}
	}
	// Temporal records it as failed (the UI's list shows Failed, not a green
	// Completed), with the state in the error's details.
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != ErrTypeRolledBack || app.NonRetryable() == false {
		t.Fatalf("workflow ended with %v, want a non-retryable %s error", err, ErrTypeRolledBack)
	}
	if f.count(ActivityRollback) != 2 || f.count(ActivityCutover+"/t_m1") != 0 || f.count(ActivityCleanup) != 0 {
		t.Fatalf("rollbacks %d, cutovers %d, cleanups %d", f.count(ActivityRollback), f.count(ActivityCutover+"/t_m1"), f.count(ActivityCleanup))
	}
	if in := f.last[ActivityPublishStable].(PublishInput); len(in.RolledBack) != 2 {
		t.Fatalf("PublishStable rolled back %v, want both moves", in.RolledBack)
	}
}

func TestVerifyFailureRollsBackByItself(t *testing.T) {
	env, f := newEnv(t)
	f.verify = func(in VerifyInput, _ int) (VerifySummary, error) {
		sum := VerifySummary{Mismatches: 1}
		return sum, temporal.NewNonRetryableApplicationError("1 row differs", ErrTypeVerification, nil, sum)
	}
	req := testRequest()
	req.OnVerifyFail = VerifyFailRollback
	env.ExecuteWorkflow(MigrationWorkflow, req)
	if st := result[MigrationState](t, env); st.Phase != PhaseRolledBack || f.count(ActivityRollback) != 2 {
		t.Fatalf("migration ended %s with %d rollbacks", st.Phase, f.count(ActivityRollback))
	}
}

func TestReverifyAfterFailure(t *testing.T) {
	env, f := newEnv(t)
	f.verify = func(in VerifyInput, n int) (VerifySummary, error) {
		// Each verify's stream is started before it, and cancelled soon
		// after it: by the failed verify's wait for a verdict, by the
		// cutover after the pass. Before this wait the first could be
		// cancelled before the environment had run it, and was never seen
		// to start (2 runs in 20 failed: "the stream started 1 times").
		f.awaitStarts(ActivityRunCDC+"/"+in.Move.Spec.ID, n)
		if n == 1 {
			sum := VerifySummary{Mismatches: 1}
			return sum, temporal.NewNonRetryableApplicationError("1 row differs", ErrTypeVerification, nil, sum)
		}
		return VerifySummary{Passed: true, Rows: 200}, nil
	}
	var upErr error
	var upDone bool
	env.RegisterDelayedCallback(func() { update(env, UpdateReverify, &upErr, &upDone) }, 3*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !upDone || upErr != nil || st.Phase != PhaseDone {
		t.Fatalf("reverify: done=%v err=%v; migration %s", upDone, upErr, st.Phase)
	}
	runs := map[string]bool{}
	for _, ts := range []string{"t_m1", "t_m2"} {
		if n := f.count(ActivityVerify + "/" + ts); n != 2 {
			t.Fatalf("%s verified %d times, want 2", ts, n)
		}
	}
	// The stream stops while the failed verify waits for its verdict (a
	// repair must be the target's only writer) and the reverify starts it
	// again.
	for _, ts := range []string{"t_m1", "t_m2"} {
		if n := f.count(ActivityRunCDC + "/" + ts); n != 2 {
			t.Errorf("%s: the stream started %d times, want 2 (stopped for the verdict, started by the reverify)", ts, n)
		}
	}
	runs[f.last[ActivityVerify+"/t_m1"].(VerifyInput).RunID] = true
	if runs["t_m1_v0"] {
		t.Fatal("the re-verify reused the failed run id")
	}
}

func TestApproveRejectedInWrongPhase(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).After(time.Minute).Return(
		func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
			return f.copySlice(in, f.record(ActivityCopySlice+"/"+in.Move.Spec.ID, in))
		})
	req := testRequest()
	req.RequireApproval = true
	var early, late error
	var earlyDone, lateDone bool
	env.RegisterDelayedCallback(func() { update(env, UpdateApprove, &early, &earlyDone) }, 30*time.Second)
	env.RegisterDelayedCallback(func() {
		st := queryState(t, env)
		for _, m := range st.Moves {
			if m.Phase != PhaseCutover {
				t.Errorf("move %s in %s at approval time, want CUTOVER (waiting for approval)", m.Spec.ID, m.Phase)
			}
		}
		if n := f.count(ActivityCutover + "/t_m1"); n != 0 {
			t.Errorf("cutover ran %d times before approval", n)
		}
		update(env, UpdateApprove, &late, &lateDone)
	}, 5*time.Hour)
	env.RegisterDelayedCallback(func() {
		// Status read right after the approval no longer says the moves
		// wait for it (the migration's copy of a move's state said so until
		// the move's next report).
		for _, m := range queryState(t, env).Moves {
			if m.Waiting == WaitApproval || strings.Contains(m.PhaseText(), "waiting for approval") {
				t.Errorf("right after approve, move %s still reads %q", m.Spec.ID, m.PhaseText())
			}
		}
	}, 5*time.Hour+time.Millisecond)
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if !earlyDone || early == nil || !strings.Contains(early.Error(), "approve-cutover is accepted when a move has passed VERIFY or waits in CUTOVER") ||
		!strings.Contains(early.Error(), "SNAPSHOT_COPY") {
		t.Fatalf("approve during the copy: done=%v err=%v, want a rejection naming the phases", earlyDone, early)
	}
	if !lateDone || late != nil {
		t.Fatalf("approve in CUTOVER: done=%v err=%v", lateDone, late)
	}
	if st.Phase != PhaseDone {
		t.Fatalf("migration ended %s", st.Phase)
	}
}

func TestApproveRejectedWithoutRequireApproval(t *testing.T) {
	env, _ := newEnv(t)
	var err error
	var done bool
	env.RegisterDelayedCallback(func() { update(env, UpdateApprove, &err, &done) }, time.Second)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	result[MigrationState](t, env)
	if !done || err == nil || !strings.Contains(err.Error(), "not started with require-approval") {
		t.Fatalf("approve: done=%v err=%v", done, err)
	}
}

func TestPauseResume(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).After(time.Minute).Return(
		func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
			n := f.record(ActivityCopySlice+"/"+in.Move.Spec.ID, in)
			return CopyProgress{Rows: 100 * int64(n), Done: n >= 4}, nil
		})
	var pErr, rErr, p2Err error
	var pDone, rDone, p2Done bool
	start := env.Now()
	env.RegisterDelayedCallback(func() { update(env, UpdatePause, &pErr, &pDone) }, 90*time.Second)
	env.RegisterDelayedCallback(func() {
		// A second pause is refused: already paused.
		update(env, UpdatePause, &p2Err, &p2Done)
		st := queryState(t, env)
		for _, m := range st.Moves {
			if !m.Paused || m.Phase != PhaseSnapshotCopy {
				t.Errorf("while paused, move %s: paused=%v phase %s", m.Spec.ID, m.Paused, m.Phase)
			}
		}
		if st.Phase != PhaseSnapshotCopy {
			t.Errorf("while the moves copy, the migration says %s", st.Phase)
		}
	}, time.Hour)
	env.RegisterDelayedCallback(func() { update(env, UpdateResume, &rErr, &rDone) }, 2*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if pErr != nil || rErr != nil || !pDone || !rDone || st.Phase != PhaseDone {
		t.Fatalf("pause %v/%v resume %v/%v, migration %s", pDone, pErr, rDone, rErr, st.Phase)
	}
	if !p2Done || p2Err == nil || !strings.Contains(p2Err.Error(), "already paused") {
		t.Fatalf("second pause: %v %v", p2Done, p2Err)
	}
	for _, id := range []string{"t_m1", "t_m2"} {
		ts := f.times(ActivityCopySlice + "/" + id)
		if len(ts) != 4 {
			t.Fatalf("%s: %d slices, want 4", id, len(ts))
		}
		for _, at := range ts {
			if off := at.Sub(start); off > 2*time.Minute && off < 2*time.Hour {
				t.Fatalf("%s: a copy slice started at +%s, while paused (+90s … +2h)", id, off)
			}
		}
		if after := ts[len(ts)-1].Sub(start); after < 2*time.Hour {
			t.Fatalf("%s: copy finished at +%s, before the resume", id, after)
		}
	}
}

func TestContinueAsNewKeepsState(t *testing.T) {
	env, f := newEnv(t)
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		return CopyProgress{Rows: 100 * int64(n), Bytes: 10, Done: n >= 3}, nil
	}
	req := testRequest()
	req.Throttle = Throttle{RowsPerSec: 500}
	in := MoveInput{Request: req, Spec: testPlan().Moves[0], MaxSlicesPerRun: 2}
	env.ExecuteWorkflow(MoveWorkflow, in)
	if !env.IsWorkflowCompleted() {
		t.Fatal("not completed")
	}
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("want continue-as-new, got %v", err)
	}
	var next MoveInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	c := next.Carry
	if c == nil || c.State.Phase != PhaseSnapshotCopy || c.State.RowsCopied != 200 || c.State.BytesCopied != 20 || c.L0 != "0/16B3748" ||
		c.Throttle.RowsPerSec != 500 || c.Runs != 0 || len(c.State.Timings) != 3 {
		t.Fatalf("carried %+v", c)
	}
	// The next run goes on from there: no second PLAN or JOINING.
	env2, f2 := newEnv(t)
	f2.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		return CopyProgress{Rows: 200 + 100*int64(n), Bytes: 10, Done: true}, nil
	}
	env2.ExecuteWorkflow(MoveWorkflow, next)
	st := result[MoveState](t, env2)
	if st.Phase != PhaseDone || st.RowsCopied != 300 || st.BytesCopied != 30 || f2.count(ActivityJoin) != 0 || f2.count(ActivityPreflightMove) != 0 {
		t.Fatalf("second run: %s rows %d bytes %d, joins %d", st.Phase, st.RowsCopied, st.BytesCopied, f2.count(ActivityJoin))
	}
	if got := phasesOf(st); !equal(got, []Phase{PhasePlan, PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify, PhaseCutover, PhaseGrace, PhaseCleanup}) {
		t.Fatalf("timings across runs: %v", got)
	}
}

func TestStoppedStreamRestartsInNewSession(t *testing.T) {
	env, f := newEnv(t)
	f.cdcLife = func(n int) time.Duration {
		if n == 1 {
			return time.Minute // the first stream dies a minute in
		}
		return 10000 * time.Hour
	}
	// CDC_CATCH_UP polls every 5s and the lag stays high for 5 minutes: the
	// dead stream is noticed there and restarted in a new session.
	f.lag = func(n int) int64 {
		if n < 60 {
			return 1 << 40
		}
		return 0
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if st.Phase != PhaseDone {
		t.Fatalf("move ended %s", st.Phase)
	}
	if n := f.count(ActivityRunCDC + "/t_m1"); n < 2 {
		t.Fatalf("CDC started %d times, want a restart", n)
	}
	if in := f.last[ActivityRunCDC+"/t_m1"].(CDCInput); in.L0 != "0/16B3748" {
		t.Fatalf("restarted stream from %q, want the slot's L0 (it resumes from its origin)", in.L0)
	}
}

func TestCutoverAbortedRetriesAfterCatchUp(t *testing.T) {
	env, f := newEnv(t)
	f.cutover = func(in CutoverInput, n int) (CutoverResult, error) {
		if n == 1 {
			return CutoverResult{}, temporal.NewNonRetryableApplicationError("over budget", ErrTypeCutoverAborted, nil)
		}
		return CutoverResult{WritePause: 30 * time.Millisecond}, nil
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if st.Phase != PhaseDone || st.Attempts != 2 || st.WritePause != 30*time.Millisecond {
		t.Fatalf("move %s after %d cutover attempts, pause %s", st.Phase, st.Attempts, st.WritePause)
	}
	want := []Phase{PhasePlan, PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify, PhaseCutover,
		PhaseCDCCatchUp, PhaseVerify, PhaseCutover, PhaseGrace, PhaseCleanup}
	if got := phasesOf(st); !equal(got, want) {
		t.Fatalf("walked %v, want %v", got, want)
	}
	// The verify after the abort re-checks the same run: the chunks that
	// the changes since touched are compared again (on 6e755b7 it resumed
	// t_m1_v0 as it stood: "0 rows compared, 351 reused ... 1m13s ago").
	if in := f.last[ActivityVerify+"/t_m1"].(VerifyInput); in.RunID != "t_m1_v0" || !in.Recheck {
		t.Fatalf("verify after abort: run %q, recheck %v; want t_m1_v0 re-checked", in.RunID, in.Recheck)
	}
}

func TestCompleteEndsGraceEarly(t *testing.T) {
	env, _ := newEnv(t)
	req := testRequest()
	req.GracePeriod = new(30 * 24 * time.Hour)
	var err error
	var done bool
	env.RegisterDelayedCallback(func() { update(env, UpdateComplete, &err, &done) }, 24*time.Hour)
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if !done || err != nil || st.Phase != PhaseDone {
		t.Fatalf("complete: %v %v, migration %s", done, err, st.Phase)
	}
	if end := st.Moves[0].Timings[len(st.Moves[0].Timings)-1].End; end.Sub(st.Moves[0].Timings[0].Start) > 2*24*time.Hour {
		t.Fatalf("move ended %s after it started, the grace period was not cut short", end.Sub(st.Moves[0].Timings[0].Start))
	}
}

func TestRollbackDuringGrace(t *testing.T) {
	env, f := newEnv(t)
	var err error
	var done bool
	env.RegisterDelayedCallback(func() {
		st := queryState(t, env)
		for _, m := range st.Moves {
			if m.Phase != PhaseGrace {
				t.Errorf("move %s in %s, want GRACE", m.Spec.ID, m.Phase)
			}
		}
		update(env, UpdateRollback, &err, &done)
	}, 30*time.Minute)
	req := testRequest()
	req.Throttle.Adaptive = &AdaptiveThrottle{MaxLatencyIncrease: 10}
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if !done || err != nil || st.Phase != PhaseRolledBack {
		t.Fatalf("rollback in GRACE: %v %v, migration %s", done, err, st.Phase)
	}
	in := f.last[ActivityRollback].(EndInput)
	if !in.Grace || in.ReverseL0 != "0/2000000" || len(in.VerifyRunIDs) != 1 || in.Move.FromVersion != 1 || in.Move.Request == nil {
		t.Fatalf("rollback input %+v", in)
	}
	// The rollback's deletes are throttled as CLEANUP's are.
	if in.Adaptive == nil || in.Adaptive.MaxLatencyIncrease != 10 {
		t.Fatalf("rollback input's adaptive limits %+v, want the request's", in.Adaptive)
	}
	if f.count(ActivityCleanup) != 0 {
		t.Fatal("a rolled back move was cleaned up as completed")
	}
}

func TestThrottleReachesTheNextSlice(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).After(time.Minute).Return(
		func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
			n := f.record(ActivityCopySlice+"/"+in.Move.Spec.ID, in)
			return CopyProgress{Rows: 100 * int64(n), Done: n >= 4}, nil
		})
	var err, bad error
	var done, badDone bool
	env.RegisterDelayedCallback(func() {
		update(env, UpdateThrottle, &bad, &badDone, Throttle{RowsPerSec: -1})
		update(env, UpdateThrottle, &err, &done, Throttle{RowsPerSec: 123, BytesPerSec: 4567, ChunkRows: 777})
	}, 90*time.Second)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !done || err != nil || st.Phase != PhaseDone {
		t.Fatalf("throttle: %v %v, migration %s", done, err, st.Phase)
	}
	if !badDone || bad == nil || !strings.Contains(bad.Error(), ">= 0") {
		t.Fatalf("negative throttle: %v %v", badDone, bad)
	}
	if in := f.last[ActivityCopySlice+"/t_m1"].(CopySliceInput); in.Throttle.RowsPerSec != 123 || in.Throttle.BytesPerSec != 4567 || in.Throttle.ChunkRows != 777 {
		t.Fatalf("last slice ran with %+v", in.Throttle)
	}
}

// A cutover activity that finds no stream in its worker is run again at once
// (not counted as an attempt); an aborted attempt's pauses reach the state
// at once, and the final state has every attempt's.
func TestCutoverPausesAcrossAttempts(t *testing.T) {
	env, f := newEnv(t)
	aborted := WritePauses{Total: 247 * time.Second, Longest: 247 * time.Second, Attempts: 1}
	var seen *MoveState
	f.cutover = func(in CutoverInput, n int) (CutoverResult, error) {
		switch n {
		case 1:
			return CutoverResult{}, temporal.NewNonRetryableApplicationError("no stream", ErrTypeNoStream, nil)
		case 2:
			return CutoverResult{}, temporal.NewNonRetryableApplicationError("drain failed", ErrTypeCutoverAborted, nil, CutoverResult{Pauses: aborted})
		}
		return CutoverResult{WritePause: 30 * time.Millisecond, Pauses: WritePauses{Total: aborted.Total + 30*time.Millisecond, Longest: aborted.Longest, Attempts: 2}}, nil
	}
	f.verify = func(in VerifyInput, n int) (VerifySummary, error) {
		if n == 2 { // the verify after the aborted attempt
			var st MoveState
			if v, err := env.QueryWorkflow(QueryState); err == nil && v.Get(&st) == nil {
				seen = &st
			}
		}
		return VerifySummary{Passed: true, Rows: 200}, nil
	}
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: testRequest(), Spec: testPlan().Moves[0]})
	st := result[MoveState](t, env)
	if seen == nil || seen.Pauses != aborted {
		t.Fatalf("state after the aborted attempt: %+v", seen)
	}
	want := WritePauses{Total: aborted.Total + 30*time.Millisecond, Longest: aborted.Longest, Attempts: 2}
	if st.Phase != PhaseDone || st.Attempts != 2 || st.WritePause != 30*time.Millisecond || st.Pauses != want || f.count(ActivityCutover+"/t_m1") != 3 {
		t.Fatalf("move %s after %d attempts (%d activity runs): pause %s, pauses %+v", st.Phase, st.Attempts, f.count(ActivityCutover+"/t_m1"), st.WritePause, st.Pauses)
	}
}

// With MaxParallelMoves 1 the second move waits for a slot (queued, shown as
// such) and starts only once the first has ended.
func TestMaxParallelMovesQueues(t *testing.T) {
	env, f := newEnv(t)
	req := testRequest()
	req.MaxParallelMoves = 1
	var queued []string
	env.RegisterDelayedCallback(func() {
		for _, m := range queryState(t, env).Moves {
			if m.Waiting == WaitSlot {
				queued = append(queued, m.Spec.ID+" "+m.PhaseText())
			}
		}
	}, 30*time.Minute) // the first move is in GRACE (an hour), the second queued
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if st.Phase != PhaseDone {
		t.Fatalf("migration ended %s: %s", st.Phase, st.Error)
	}
	if len(queued) != 1 || !strings.Contains(queued[0], "queued: waiting for a move slot") {
		t.Fatalf("moves queued half an hour in: %v", queued)
	}
	first, second := f.times(ActivityCopySlice+"/t_m1"), f.times(ActivityCopySlice+"/t_m2")
	if len(first) == 0 || len(second) == 0 {
		t.Fatalf("copy slices: %d and %d", len(first), len(second))
	}
	if a, b := first[0], second[0]; a.After(b) {
		first, second = second, first
	}
	cleanups := f.times(ActivityCleanup)
	if len(cleanups) != 2 || second[0].Before(cleanups[0]) {
		t.Fatalf("the second move copied at %s, before the first ended (cleanups %v)", second[0], cleanups)
	}
}

// A rollback asked while a move waits for its slot rolls back the running
// one and never starts the queued one.
func TestRollbackSkipsQueuedMoves(t *testing.T) {
	env, f := newEnv(t)
	req := testRequest()
	req.MaxParallelMoves = 1
	var err error
	var done bool
	env.RegisterDelayedCallback(func() { update(env, UpdateRollback, &err, &done) }, 30*time.Minute)
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if !done || err != nil {
		t.Fatalf("rollback: %v %v", done, err)
	}
	if st.Phase != PhaseRolledBack {
		t.Fatalf("migration ended %s, want ROLLED_BACK", st.Phase)
	}
	started := 0
	for _, m := range st.Moves {
		if m.Phase != PhaseRolledBack {
			t.Fatalf("move %s ended %s", m.Spec.ID, m.Phase)
		}
		if f.count(ActivityCopySlice+"/"+m.Spec.ID) > 0 {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("%d moves copied; the queued one must never start", started)
	}
	// The queued move's Rollback activity still runs: it gives its ranges
	// back and records its end (reshard.moves), which nothing else would.
	if n := f.count(ActivityRollback); n != 2 {
		t.Fatalf("Rollback ran %d times, want 2 (the started move's and the queued one's)", n)
	}
	if in := f.last[ActivityPublishStable].(PublishInput); len(in.RolledBack) != 2 {
		t.Fatalf("PublishStable rolled back %v, want both moves", in.RolledBack)
	}
}

// The adaptive limits reach every copy slice, verify and cleanup; an update
// of the rates alone keeps them, one of the adaptive limits alone
// (KeepRates) keeps the rates. Each slice resumes from the last one's
// adaptive state; verify and cleanup get the copy's baselines, not its rate.
func TestAdaptiveThrottleReachesCopyVerifyCleanup(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).After(time.Minute).Return(
		func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
			n := f.record(ActivityCopySlice+"/"+in.Move.Spec.ID, in)
			f.record(fmt.Sprintf("%s/%s/%d", ActivityCopySlice, in.Move.Spec.ID, n), in)
			return CopyProgress{Rows: 100 * int64(n), Done: n >= 5, Adaptive: &AdaptiveStatus{RowsPerSec: float64(1000 * n),
				Signal: "replica_lag", Reason: "replica lag 3s > 2s", SourceBaseline: time.Millisecond, TargetBaseline: 2 * time.Millisecond}}, nil
		})
	req := testRequest()
	req.Throttle = Throttle{RowsPerSec: 9000, Adaptive: &AdaptiveThrottle{MaxLatencyIncrease: 10}}
	var errs [3]error
	var dones [3]bool
	env.RegisterDelayedCallback(func() {
		update(env, UpdateThrottle, &errs[0], &dones[0], Throttle{RowsPerSec: 7000}) // rates alone
	}, 90*time.Second)
	env.RegisterDelayedCallback(func() {
		update(env, UpdateThrottle, &errs[1], &dones[1], Throttle{KeepRates: true, Adaptive: &AdaptiveThrottle{MaxReplicaLag: 2 * time.Second}})
	}, 150*time.Second)
	env.RegisterDelayedCallback(func() {
		update(env, UpdateThrottle, &errs[2], &dones[2], Throttle{KeepRates: true, Adaptive: &AdaptiveThrottle{MaxReplicaLag: time.Millisecond}})
	}, 160*time.Second)
	env.ExecuteWorkflow(MigrationWorkflow, req)
	st := result[MigrationState](t, env)
	if st.Phase != PhaseDone || !dones[0] || !dones[1] || errs[0] != nil || errs[1] != nil {
		t.Fatalf("migration %s, updates %v %v", st.Phase, errs, dones)
	}
	if !dones[2] || errs[2] == nil || !strings.Contains(errs[2].Error(), "--max-replica-lag") {
		t.Fatalf("a replica lag limit of 1ms was accepted: %v %v", dones[2], errs[2])
	}
	slice := func(n int) CopySliceInput {
		return f.last[fmt.Sprintf("%s/t_m1/%d", ActivityCopySlice, n)].(CopySliceInput)
	}
	if in := slice(1); in.Adaptive != nil || in.Throttle.Adaptive.MaxLatencyIncrease != 10 || in.Throttle.RowsPerSec != 9000 {
		t.Fatalf("first slice: %+v, adaptive %+v", in.Throttle, in.Adaptive)
	}
	if in := slice(2); in.Adaptive == nil || in.Adaptive.RowsPerSec != 1000 || in.Throttle.RowsPerSec != 9000 {
		t.Fatalf("second slice: %+v, resumed from %+v", in.Throttle, in.Adaptive)
	}
	if in := slice(3); in.Adaptive.RowsPerSec != 2000 || in.Throttle.RowsPerSec != 7000 || in.Throttle.Adaptive.MaxLatencyIncrease != 10 {
		t.Fatalf("third slice (after the rates alone): %+v adaptive %+v, resumed from %+v", in.Throttle, in.Throttle.Adaptive, in.Adaptive)
	}
	if in := slice(5); in.Throttle.RowsPerSec != 7000 || in.Throttle.Adaptive.MaxReplicaLag != 2*time.Second || in.Throttle.Adaptive.MaxLatencyIncrease != 0 {
		t.Fatalf("last slice (after the adaptive limits alone): %+v adaptive %+v", in.Throttle, in.Throttle.Adaptive)
	}
	v := f.last[ActivityVerify+"/t_m1"].(VerifyInput)
	c := f.last[ActivityCleanup].(EndInput)
	for _, in := range []struct {
		lim  *AdaptiveThrottle
		base *AdaptiveStatus
	}{{v.Adaptive, v.Baseline}, {c.Adaptive, c.Baseline}} {
		if in.lim.MaxReplicaLag != 2*time.Second || in.base == nil || in.base.SourceBaseline != time.Millisecond || in.base.RowsPerSec != 0 {
			t.Fatalf("verify/cleanup got limits %+v, baseline %+v", in.lim, in.base)
		}
	}
}

// The throttle's text is part of the phase's, in the phases it steers.
func TestAdaptiveText(t *testing.T) {
	a := &AdaptiveStatus{RowsPerSec: 3200, Signal: "source_probe_latency", Reason: "source probe latency +14% (1.1ms over 1ms) > +10%"}
	m := MoveState{Phase: PhaseSnapshotCopy, Adaptive: a}
	if got, want := m.PhaseText(), "SNAPSHOT_COPY (throttled: source probe latency +14% (1.1ms over 1ms) > +10%, 3200 rows/s)"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	m.Phase = PhaseCDCCatchUp
	if got := m.PhaseText(); got != "CDC_CATCH_UP" {
		t.Fatalf("catch-up shows the throttle: %q", got)
	}
	m.Phase, m.Adaptive = PhaseCleanup, &AdaptiveStatus{RowsPerSec: 45000, Signal: "none"}
	if got := m.PhaseText(); got != "CLEANUP (adaptive: 45000 rows/s)" {
		t.Fatalf("%q", got)
	}
	m.Adaptive = &AdaptiveStatus{SourceBaseline: time.Millisecond} // baselines only
	if got := m.PhaseText(); got != "CLEANUP" {
		t.Fatalf("%q", got)
	}
}

// TestReverifyClearsTheFailureAtOnce: once reverify is accepted, the failed
// result is no longer shown (it stayed the move's verify result, FAILED: 1
// mismatch(es), until the new verify ended).
func TestReverifyClearsTheFailureAtOnce(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityVerify, mock.Anything, mock.Anything).After(time.Hour).Return(
		func(ctx context.Context, in VerifyInput) (VerifySummary, error) {
			if f.record(ActivityVerify+"/"+in.Move.Spec.ID, in) == 1 {
				sum := VerifySummary{Mismatches: 1}
				return sum, temporal.NewNonRetryableApplicationError("1 row differs", ErrTypeVerification, nil, sum)
			}
			return VerifySummary{Passed: true, Rows: 200}, nil
		})
	var upErr error
	var upDone bool
	var before, after MigrationState
	env.RegisterDelayedCallback(func() { before = queryState(t, env) }, 3*time.Hour-time.Minute)
	env.RegisterDelayedCallback(func() { update(env, UpdateReverify, &upErr, &upDone) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() { after = queryState(t, env) }, 3*time.Hour+time.Second)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !upDone || upErr != nil || st.Phase != PhaseDone {
		t.Fatalf("reverify: done=%v err=%v; migration %s", upDone, upErr, st.Phase)
	}
	for i, m := range before.Moves {
		if m.Verify == nil || m.Verify.Passed || m.Waiting != WaitVerdict {
			t.Fatalf("before reverify, move %d: verify %+v waiting %q; want the failure", i, m.Verify, m.Waiting)
		}
	}
	for _, m := range after.Moves {
		if m.Phase != PhaseVerify || m.Verify != nil || m.Waiting != "" {
			t.Errorf("a second after reverify, move %s: %s, verify %+v, waiting %q; want VERIFY running with no result", m.Spec.ID, m.Phase, m.Verify, m.Waiting)
		}
		if txt := movesTable([]MoveState{m}, Throttle{}, env.Now()); !strings.Contains(txt, "  - verify running ·") || strings.Contains(txt, "FAILED") {
			t.Errorf("the UI's table after reverify:\n%s", txt)
		}
	}
	if f.count(ActivityVerify+"/t_m1") != 2 {
		t.Fatalf("verify ran %d times", f.count(ActivityVerify+"/t_m1"))
	}
}

// currentDetails is the workflow's current details (the Temporal UI's), by
// the built-in metadata query.
func currentDetails(t *testing.T, env *testsuite.TestWorkflowEnvironment) string {
	t.Helper()
	v, err := env.QueryWorkflow("__temporal_workflow_metadata")
	if err != nil {
		t.Errorf("metadata query: %v", err)
		return ""
	}
	var md sdkpb.WorkflowMetadata
	if err := v.Get(&md); err != nil {
		t.Error(err)
	}
	return md.GetCurrentDetails()
}

// TestHeadlineIsCurrent: the migration's topology version follows the
// cutovers and the reverse cutovers (it said v1 → v2 through GRACE while v6
// was current, and "moving 20.00%" after a rollback), and the UI's details
// show the throttle in force at once after reshard throttle.
func TestHeadlineIsCurrent(t *testing.T) {
	env, f := newEnv(t)
	versions := map[string]int64{"t_m1": 3, "t_m2": 4}
	f.cutover = func(in CutoverInput, _ int) (CutoverResult, error) {
		return CutoverResult{WritePause: time.Millisecond, Version: versions[in.Move.Spec.ID]}, nil
	}
	env.OnActivity(ActivityRollback, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in EndInput) (CleanupResult, error) {
			f.record(ActivityRollback, in)
			return CleanupResult{Version: versions[in.Move.Spec.ID] + 2}, nil
		})
	var grace MigrationState
	var graceDetails, throttled string
	var err, terr error
	var done, tdone bool
	env.RegisterDelayedCallback(func() {
		grace = queryState(t, env)
		graceDetails = currentDetails(t, env)
		update(env, UpdateThrottle, &terr, &tdone, Throttle{RowsPerSec: 500})
	}, 30*time.Minute)
	env.RegisterDelayedCallback(func() {
		throttled = currentDetails(t, env)
		update(env, UpdateRollback, &err, &done)
	}, 31*time.Minute)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !done || err != nil || !tdone || terr != nil || st.Phase != PhaseRolledBack {
		t.Fatalf("throttle %v %v, rollback %v %v, migration %s", tdone, terr, done, err, st.Phase)
	}
	if grace.Phase != PhaseGrace || grace.Version != 4 {
		t.Errorf("in GRACE: %s, version %d; want GRACE, v4 (the second cutover's)", grace.Phase, grace.Version)
	}
	if h := "topology v1 → v4  moving 20.00% of the token space"; grace.Headline() != h || !strings.Contains(graceDetails, h) {
		t.Errorf("GRACE headline %q, details:\n%s\nwant %q", grace.Headline(), graceDetails, h)
	}
	if !strings.Contains(throttled, "throttle per move: 500 rows/s") {
		t.Errorf("details after reshard throttle:\n%s", throttled)
	}
	// The details say when they were drawn (the UI's figures are not live).
	if !strings.Contains(graceDetails, "figures as of ") || !strings.Contains(throttled, "figures as of ") || graceDetails[strings.Index(graceDetails, "figures as of "):][:22] == throttled[strings.Index(throttled, "figures as of "):][:22] {
		t.Errorf("details should say when they were drawn, a minute apart:\n%s\n%s", graceDetails, throttled)
	}
	if h := "rolled back: nothing moved (topology v9 has the ring of v1)"; st.Headline() != h {
		t.Errorf("after the rollback: %q, want %q", st.Headline(), h)
	}
	for _, m := range st.Moves {
		if m.Version != versions[m.Spec.ID]+2 {
			t.Errorf("move %s: version %d, want its reverse cutover's", m.Spec.ID, m.Version)
		}
	}
}

// TestRollbackReachesMovesInPlan: a rollback while the moves are in PLAN
// (their preflight running) rolls them back: it was refused ("no move can
// be rolled back now") when every move was in PLAN, and with one move past
// PLAN the other was not relayed to, took no rollback, and went on to copy
// and cut over (the operator walk's 'rolling back 1 moves' of 2).
func TestRollbackReachesMovesInPlan(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityPreflightMove, mock.Anything, mock.Anything).After(time.Minute).Return(
		func(ctx context.Context, in MoveRef) error { f.record(ActivityPreflightMove, in); return nil })
	var err error
	var done bool
	var inPlan MigrationState
	env.RegisterDelayedCallback(func() {
		inPlan = queryState(t, env)
		update(env, UpdateRollback, &err, &done)
	}, 30*time.Second)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	for _, m := range inPlan.Moves {
		if m.Phase != PhasePlan {
			t.Fatalf("at the rollback, move %s is in %s, want PLAN", m.Spec.ID, m.Phase)
		}
	}
	if !done || err != nil || st.Phase != PhaseRolledBack {
		t.Fatalf("rollback in PLAN: %v %v, migration %s", done, err, st.Phase)
	}
	for _, m := range st.Moves {
		if m.Phase != PhaseRolledBack {
			t.Errorf("move %s ended %s through %v, want ROLLED_BACK", m.Spec.ID, m.Phase, phasesOf(m))
		}
	}
	if n := f.count(ActivityCopySlice+"/t_m1") + f.count(ActivityCopySlice+"/t_m2"); n != 0 {
		t.Errorf("%d copy slices ran after the rollback", n)
	}
}
