package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
)

// A cancellation requested of a workflow (the Temporal UI's Request
// Cancellation, temporal workflow cancel) is a rollback: the migration ends
// ROLLED_BACK by itself, every move's Rollback activity ran, and the stable
// topology is published with every move rolled back. On 6e755b7 it ended
// FAILED (canceled) with the ranges left migrating and no rollback run.

// cancelledAt runs the migration req, cancels it at the given test time and
// returns its final state.
func cancelledAt(t *testing.T, f *fakes, req MigrationRequest, at time.Duration) MigrationState {
	t.Helper()
	f.env.RegisterDelayedCallback(func() { f.env.CancelWorkflow() }, at)
	f.env.ExecuteWorkflow(MigrationWorkflow, req)
	return result[MigrationState](t, f.env)
}

// assertRolledBackByCancel checks what every cancel before CLEANUP must end
// with.
func assertRolledBackByCancel(t *testing.T, f *fakes, st MigrationState) {
	t.Helper()
	if st.Phase != PhaseRolledBack {
		t.Fatalf("cancelled migration ended %s (error %q), want ROLLED_BACK", st.Phase, st.Error)
	}
	for _, m := range st.Moves {
		if m.Phase != PhaseRolledBack {
			t.Fatalf("move %s ended %s (error %q), want ROLLED_BACK", m.Spec.ID, m.Phase, m.Error)
		}
	}
	var app *temporal.ApplicationError
	if err := f.env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != ErrTypeRolledBack {
		t.Fatalf("workflow ended with %v, want the %s error", err, ErrTypeRolledBack)
	}
	if n := f.count(ActivityRollback); n != 2 {
		t.Fatalf("Rollback ran %d times, want once per move (2)", n)
	}
	if f.count(ActivityPublishStable) != 1 {
		t.Fatalf("PublishStable ran %d times, want 1", f.count(ActivityPublishStable))
	}
	if in := f.last[ActivityPublishStable].(PublishInput); len(in.RolledBack) != 2 {
		t.Fatalf("PublishStable rolled back %v, want both moves", in.RolledBack)
	}
	if f.count(ActivityCleanup) != 0 {
		t.Fatal("a cancelled move was cleaned up as completed")
	}
}

// Cancelled while the moves wait for approval in CUTOVER: the copies are
// dropped (rollback before cutover).
func TestCancelBeforeCutoverRollsBack(t *testing.T) {
	_, f := newEnv(t)
	req := testRequest()
	req.RequireApproval = true
	st := cancelledAt(t, f, req, time.Hour)
	assertRolledBackByCancel(t, f, st)
	in := f.last[ActivityRollback].(EndInput)
	if in.Grace || in.Move.Request == nil || in.Move.FromVersion != 1 {
		t.Fatalf("rollback input %+v, want a rollback before cutover with the migration's plan", in)
	}
	// The stream was stopped before the rollback ran (the slot takes one reader).
	if f.count(ActivityCutover+"/t_m1") != 0 {
		t.Fatal("a cutover ran after the cancel")
	}
}

// Cancelled in GRACE: the cutover is reversed over the reverse stream.
func TestCancelInGraceRollsBack(t *testing.T) {
	_, f := newEnv(t)
	st := cancelledAt(t, f, testRequest(), 30*time.Minute)
	assertRolledBackByCancel(t, f, st)
	in := f.last[ActivityRollback].(EndInput)
	if !in.Grace || in.ReverseL0 != "0/2000000" {
		t.Fatalf("rollback input %+v, want the reverse cutover from the reverse slot's L0", in)
	}
}

// Cancelled while the plan is published: no move has started; the migrating
// topology is given back move by move (the Rollback activity records each
// move's end), then published stable.
func TestCancelWhilePublishingRollsBack(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityPublishMigrating, mock.Anything, mock.Anything).After(10 * time.Minute).Return(
		func(ctx context.Context, in PublishInput) (int64, error) {
			f.record(ActivityPublishMigrating, in)
			return 2, nil
		})
	st := cancelledAt(t, f, testRequest(), time.Minute)
	assertRolledBackByCancel(t, f, st)
	if n := f.count(ActivityJoin); n != 0 {
		t.Fatalf("Join ran %d times after the cancel", n)
	}
}

// Cancelled in CLEANUP, past the point of no return: the cleanup finishes
// and the migration is DONE, not left half cleaned.
func TestCancelInCleanupCompletes(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCleanup, mock.Anything, mock.Anything).After(time.Hour).Return(
		func(ctx context.Context, in EndInput) (CleanupResult, error) {
			f.record(ActivityCleanup, in)
			return CleanupResult{RowsDeleted: 200}, nil
		})
	req := testRequest()
	req.GracePeriod = new(time.Duration) // no GRACE: CLEANUP right after the cutover
	st := cancelledAt(t, f, req, 30*time.Minute)
	if st.Phase != PhaseDone {
		t.Fatalf("migration cancelled in CLEANUP ended %s (error %q), want DONE", st.Phase, st.Error)
	}
	if f.count(ActivityRollback) != 0 {
		t.Fatal("a move past its cutover's point of no return was rolled back")
	}
	if f.count(ActivityCleanup) < 2 {
		t.Fatalf("Cleanup ran %d times, want each move's to finish", f.count(ActivityCleanup))
	}
}

// A Move workflow cancelled on its own (its row in the UI) rolls back too.
func TestCancelledMoveRollsBack(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCopySlice, mock.Anything, mock.Anything).After(time.Minute).Return(
		func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
			f.record(ActivityCopySlice, in)
			return CopyProgress{Rows: 10}, nil
		})
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 10*time.Minute)
	req := testRequest()
	env.ExecuteWorkflow(MoveWorkflow, MoveInput{Request: req, Spec: testPlan().Moves[0], FromVersion: 1})
	ms := result[MoveState](t, env)
	if ms.Phase != PhaseRolledBack {
		t.Fatalf("cancelled move ended %s (error %q), want ROLLED_BACK", ms.Phase, ms.Error)
	}
	if got := phasesOf(ms); got[len(got)-1] != PhaseRollingBack || got[len(got)-2] != PhaseSnapshotCopy {
		t.Fatalf("move walked %v, want SNAPSHOT_COPY then ROLLING_BACK", got)
	}
	if f.count(ActivityRollback) != 1 {
		t.Fatalf("Rollback ran %d times, want 1", f.count(ActivityRollback))
	}
}

// A move stopped for the operator (a collision) rolls back on a cancel,
// as it does on rollback.
func TestCancelStoppedMoveRollsBack(t *testing.T) {
	_, f := newEnv(t)
	collideOnce(f)
	st := cancelledAt(t, f, testRequest(), 30*time.Minute)
	assertRolledBackByCancel(t, f, st)
	if st.Moves[0].Stopped || st.Moves[0].Error != "" {
		t.Fatalf("move t_m1 after the cancel: stopped %v, error %q", st.Moves[0].Stopped, st.Moves[0].Error)
	}
	if n := f.count(ActivityCopySlice + "/t_m1"); n != 1 {
		t.Fatalf("t_m1 copied %d slices; a cancelled stopped move copies nothing more", n)
	}
}

// Cancelled while a cutover attempt runs: the attempt may have published
// before it heard of the cancel, so the rollback carries the reverse slot's
// L0 (the activity reverses a published cutover over it).
func TestCancelDuringCutoverCarriesTheReverseSlot(t *testing.T) {
	env, f := newEnv(t)
	env.OnActivity(ActivityCutover, mock.Anything, mock.Anything).After(time.Hour).Return(
		func(ctx context.Context, in CutoverInput) (CutoverResult, error) {
			return f.cutover(in, f.record(ActivityCutover+"/"+in.Move.Spec.ID, in))
		})
	st := cancelledAt(t, f, testRequest(), 10*time.Minute)
	assertRolledBackByCancel(t, f, st)
	in := f.last[ActivityRollback].(EndInput)
	if in.Grace || in.ReverseL0 != "0/2000000" || in.Budget <= 0 {
		t.Fatalf("rollback input %+v, want a rollback before GRACE carrying the reverse slot's L0 and the budget", in)
	}
}
