package workflows

import (
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
)

// collideOnce makes the first copy slice of move t_m1 meet a primary-key
// collision, as backfill reports it; every later slice copies.
func collideOnce(f *fakes) {
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		if in.Move.Spec.ID == "t_m1" && n == 1 {
			return CopyProgress{}, temporal.NewNonRetryableApplicationError(
				`copy users: key (id)=(42) collides with a row shard5 owns: resolve it on shard5`, ErrTypeCollision, nil)
		}
		return CopyProgress{Rows: 100 * int64(n), Bytes: 1000, Done: n >= 3}, nil
	}
}

// A move that meets an error no retry fixes before CUTOVER stops in its
// phase and says why and what to do; resume runs the phase again.
func TestStoppedMoveResumes(t *testing.T) {
	env, f := newEnv(t)
	collideOnce(f)
	var early, resume error
	var earlyDone, resumeDone bool
	env.RegisterDelayedCallback(func() {
		st := queryState(t, env)
		m := st.Moves[0]
		if m.Spec.ID != "t_m1" || m.Phase != PhaseSnapshotCopy || !m.Stopped ||
			!strings.Contains(m.Error, "stopped in SNAPSHOT_COPY: copy users: key (id)=(42) collides") ||
			!strings.Contains(m.Error, "Once the cause is fixed, reshard resume t runs SNAPSHOT_COPY again; reshard rollback t undoes the move") {
			t.Errorf("after the collision, move %s: phase %s stopped %v error %q", m.Spec.ID, m.Phase, m.Stopped, m.Error)
		}
		if st.Phase.Terminal() {
			t.Errorf("migration ended (%s) while a move waits for the operator", st.Phase)
		}
		update(env, UpdateResume, &resume, &resumeDone)
	}, 2*time.Hour)
	// Before the collision nothing is stopped or paused: resume is refused.
	env.RegisterDelayedCallback(func() { update(env, UpdateResume, &early, &earlyDone) }, 0)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !earlyDone || early == nil || !strings.Contains(early.Error(), "not paused, and no move is stopped") {
		t.Errorf("resume with nothing to resume: done %v, %v", earlyDone, early)
	}
	if !resumeDone || resume != nil {
		t.Fatalf("resume of the stopped move: done %v, %v", resumeDone, resume)
	}
	if st.Phase != PhaseDone {
		t.Fatalf("migration ended %s (%s), want DONE", st.Phase, st.Error)
	}
	for _, m := range st.Moves {
		if m.Phase != PhaseDone || m.Stopped || m.Error != "" {
			t.Errorf("move %s ended %s, stopped %v, error %q", m.Spec.ID, m.Phase, m.Stopped, m.Error)
		}
	}
	ts := f.times(ActivityCopySlice + "/t_m1")
	if len(ts) != 3 || ts[1].Sub(ts[0]) < 2*time.Hour {
		t.Fatalf("t_m1 copy slices at %v: want the collision, then two slices after the resume at +2h", ts)
	}
}

// A stopped move can be rolled back instead.
func TestStoppedMoveRollsBack(t *testing.T) {
	env, f := newEnv(t)
	collideOnce(f)
	var rb error
	var rbDone bool
	env.RegisterDelayedCallback(func() { update(env, UpdateRollback, &rb, &rbDone) }, 30*time.Minute)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !rbDone || rb != nil {
		t.Fatalf("rollback: done %v, %v", rbDone, rb)
	}
	if st.Phase != PhaseRolledBack || st.Moves[0].Phase != PhaseRolledBack || st.Moves[0].Stopped {
		t.Fatalf("migration %s, move t_m1 %s (stopped %v)", st.Phase, st.Moves[0].Phase, st.Moves[0].Stopped)
	}
	if n := f.count(ActivityCopySlice + "/t_m1"); n != 1 {
		t.Fatalf("t_m1 copied %d slices; a rollback of a stopped move copies nothing more", n)
	}
}

// A move whose source failed over (cdc.FailedOverError, classified
// ErrTypeFailedOver) stops for the operator without the advice to fix the
// cause and resume: nothing brings a lost slot's changes back, and resuming
// from a new slot would skip them. Rolling back works.
func TestFailedOverMoveStopsWithoutResumeAdvice(t *testing.T) {
	env, f := newEnv(t)
	f.copySlice = func(in CopySliceInput, n int) (CopyProgress, error) {
		if in.Move.Spec.ID == "t_m1" && n == 1 {
			return CopyProgress{}, temporal.NewNonRetryableApplicationError(
				`source shard1 failed over (timeline 1 → 2, slot reshard_t_m1 missing): the changes since 0/3000000 may be missing on the target; repair needed`, ErrTypeFailedOver, nil)
		}
		return CopyProgress{Rows: 100 * int64(n), Bytes: 1000, Done: n >= 3}, nil
	}
	var rb error
	var rbDone bool
	env.RegisterDelayedCallback(func() {
		m := queryState(t, env).Moves[0]
		if !m.Stopped || !strings.Contains(m.Error, "source shard1 failed over (timeline 1 → 2") ||
			!strings.Contains(m.Error, "Resuming cannot bring the missing changes back") ||
			!strings.Contains(m.Error, "reshard rollback t undoes the move") || strings.Contains(m.Error, "Once the cause is fixed") {
			t.Errorf("after the failover, move %s: stopped %v error %q", m.Spec.ID, m.Stopped, m.Error)
		}
		update(env, UpdateRollback, &rb, &rbDone)
	}, 30*time.Minute)
	env.ExecuteWorkflow(MigrationWorkflow, testRequest())
	st := result[MigrationState](t, env)
	if !rbDone || rb != nil || st.Phase != PhaseRolledBack {
		t.Fatalf("rollback: done %v, %v; migration %s", rbDone, rb, st.Phase)
	}
}
