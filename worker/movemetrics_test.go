package worker

import (
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// The move-state gauges the alert rules read: moves per phase, moves
// stopped for an operator by reason, the longest approval wait and GRACE
// overrun; ended moves are not counted.
func TestMoveFigures(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	states := []workflows.MigrationState{
		{Moves: []workflows.MoveState{
			{Phase: workflows.PhaseVerify, Waiting: workflows.WaitVerdict},
			{Phase: workflows.PhaseCDCCatchUp, Stopped: true},
			{Phase: workflows.PhaseCutover, Waiting: workflows.WaitApproval, UpdatedAt: now.Add(-5 * time.Hour)},
			{Phase: workflows.PhaseVerify, Waiting: workflows.WaitApproval, UpdatedAt: now.Add(-time.Hour)},
		}},
		{Moves: []workflows.MoveState{
			{Phase: workflows.PhaseGrace, GraceUntil: now.Add(-20 * time.Minute)},
			{Phase: workflows.PhaseGrace, GraceUntil: now.Add(time.Hour)},
			{Phase: workflows.PhaseDone},
			{Phase: workflows.PhaseRolledBack},
		}},
	}
	f := figuresOf(states, now)
	if f.Migrations != 2 {
		t.Errorf("migrations %d, want 2", f.Migrations)
	}
	want := map[workflows.Phase]int{workflows.PhaseVerify: 2, workflows.PhaseCDCCatchUp: 1, workflows.PhaseCutover: 1, workflows.PhaseGrace: 2}
	for p, n := range want {
		if f.Phases[p] != n {
			t.Errorf("phase %s: %d moves, want %d (%v)", p, f.Phases[p], n, f.Phases)
		}
	}
	if len(f.Phases) != len(want) {
		t.Errorf("phases %v: ended moves are counted", f.Phases)
	}
	if f.Stopped[stopVerifyFailed] != 1 || f.Stopped[stopStopped] != 1 {
		t.Errorf("stopped %v, want one verify_failed and one stopped", f.Stopped)
	}
	if f.ApprovalWait != 5*time.Hour {
		t.Errorf("approval wait %s, want 5h (the longest)", f.ApprovalWait)
	}
	if f.GraceOverdue != 20*time.Minute {
		t.Errorf("GRACE overdue %s, want 20m", f.GraceOverdue)
	}
	if f := figuresOf(nil, now); f.Migrations != 0 || f.ApprovalWait != 0 || f.GraceOverdue != 0 || len(f.Stopped) != 0 {
		t.Errorf("no migration: %+v", f)
	}
}
