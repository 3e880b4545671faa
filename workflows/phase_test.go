package workflows

import "testing"

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
