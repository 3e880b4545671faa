package workflows

import "testing"

// verify --repair's choice of moves, without a worker: only stopped moves
// (or one waiting for the verdict on a failed verify), only the one named.
func TestRepairable(t *testing.T) {
	s := MigrationState{Moves: []MoveState{
		{Spec: MoveSpec{ID: "m1"}, Phase: PhaseCDCCatchUp, Stopped: true},
		{Spec: MoveSpec{ID: "m2"}, Phase: PhaseCDCCatchUp},
		{Spec: MoveSpec{ID: "m3"}, Phase: PhaseVerify, Waiting: WaitVerdict},
	}}
	chosen, refusals := s.Repairable("")
	if len(chosen) != 2 || chosen[0].Spec.ID != "m1" || chosen[1].Spec.ID != "m3" || len(refusals) != 1 {
		t.Errorf("every move: chose %v, refused %q", chosen, refusals)
	}
	if chosen, refusals := s.Repairable("m2"); len(chosen) != 0 || len(refusals) != 1 {
		t.Errorf("m2: chose %v, refused %q", chosen, refusals)
	}
	if chosen, refusals := s.Repairable("m9"); len(chosen)+len(refusals) != 0 {
		t.Errorf("no such move: chose %v, refused %q", chosen, refusals)
	}
}
