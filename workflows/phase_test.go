package workflows

import (
	"strings"
	"testing"
	"time"
)

func TestPhaseTransitions(t *testing.T) {
	forward := []Phase{PhasePlan, PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify, PhaseCutover, PhaseGrace, PhaseCleanup, PhaseDone}
	for i := 0; i+1 < len(forward); i++ {
		if err := forward[i].Next(forward[i+1]); err != nil {
			t.Errorf("forward path: %v", err)
		}
	}
	bad := [][2]Phase{
		{PhasePlan, PhaseCutover}, {PhaseSnapshotCopy, PhaseGrace}, {PhaseCleanup, PhaseRollingBack},
		{PhaseDone, PhasePlan}, {PhaseRolledBack, PhaseJoining}, {PhaseFailed, PhasePlan}, {PhaseVerify, PhaseGrace},
	}
	for _, b := range bad {
		if err := b[0].Next(b[1]); err == nil {
			t.Errorf("%s → %s allowed", b[0], b[1])
		}
	}
	for _, p := range Phases {
		if !p.Valid() {
			t.Errorf("%s not valid", p)
		}
		if p.Terminal() && len(transitions[p]) != 0 {
			t.Errorf("terminal %s has transitions", p)
		}
		if !p.Terminal() && len(transitions[p]) == 0 {
			t.Errorf("non-terminal %s has no way out", p)
		}
	}
	if PhaseCleanup.CanRollBack() || !PhaseGrace.CanRollBack() || !PhaseVerify.CanRollBack() || PhasePlan.CanRollBack() {
		t.Error("CanRollBack disagrees with DESIGN.md: rollback before CLEANUP only")
	}
	if Phase("COPY").Valid() {
		t.Error("unknown phase valid")
	}
}

// The copy's ETA, as status and the UI's details show it: the copy's own
// estimate of its end less the reader's clock (so a figure read later is
// no older), else the rate since the copy started, else the throttle.
func TestETAText(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	copying := MoveState{Spec: MoveSpec{EstRows: 1000}, Phase: PhaseSnapshotCopy, RowsCopied: 100, UpdatedAt: now,
		Timings: []PhaseTiming{{Phase: PhaseSnapshotCopy, Start: now.Add(-10 * time.Second)}}}
	with := func(f func(*MoveState)) MoveState { m := copying; f(&m); return m }
	for _, tc := range []struct {
		name string
		m    MoveState
		t    Throttle
		want string
	}{
		{"own estimate", with(func(m *MoveState) { m.CopyEnd = now.Add(42 * time.Second) }), Throttle{}, "42s"},
		{"own estimate, due", with(func(m *MoveState) { m.CopyEnd = now.Add(-3 * time.Second) }), Throttle{}, "0s"},
		{"since the start", copying, Throttle{}, "1m30s"},
		{"throttle before any row", with(func(m *MoveState) { m.RowsCopied, m.Timings = 0, nil }), Throttle{RowsPerSec: 100}, "10s"},
		{"nothing tells", with(func(m *MoveState) { m.RowsCopied, m.Timings = 0, nil }), Throttle{}, "?"},
		{"paused", with(func(m *MoveState) { m.Paused, m.CopyEnd = true, now.Add(time.Minute) }), Throttle{}, "paused"},
		{"copied", with(func(m *MoveState) { m.CopyDone, m.CopyEnd = true, now.Add(time.Minute) }), Throttle{}, "-"},
	} {
		if got := tc.m.ETAText(tc.t, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	table := movesTable([]MoveState{with(func(m *MoveState) { m.CopyEnd = now.Add(42 * time.Second) })}, Throttle{}, now)
	if !strings.Contains(table, "| copy ETA |") || !strings.Contains(table, "| 100 / 1000 | 42s |") {
		t.Errorf("the UI's table lacks the ETA status shows:\n%s", table)
	}
}
