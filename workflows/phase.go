package workflows

import "fmt"

// Phase is where a move (or a whole migration) stands. The same strings
// appear in logs, metric labels, the ReshardPhase search attribute and
// `reshard status`.
type Phase string

const (
	PhasePlan         Phase = "PLAN"
	PhaseJoining      Phase = "JOINING"
	PhaseSnapshotCopy Phase = "SNAPSHOT_COPY"
	PhaseCDCCatchUp   Phase = "CDC_CATCH_UP"
	PhaseVerify       Phase = "VERIFY"
	PhaseCutover      Phase = "CUTOVER"
	PhaseGrace        Phase = "GRACE"
	PhaseCleanup      Phase = "CLEANUP"
	PhaseDone         Phase = "DONE"
	PhaseRollingBack  Phase = "ROLLING_BACK"
	PhaseRolledBack   Phase = "ROLLED_BACK"
	PhaseFailed       Phase = "FAILED"
)

// Phases lists every phase in the order a move walks them.
var Phases = []Phase{PhasePlan, PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify, PhaseCutover,
	PhaseGrace, PhaseCleanup, PhaseDone, PhaseRollingBack, PhaseRolledBack, PhaseFailed}

// transitions is the one table of allowed moves between phases.
var transitions = map[Phase][]Phase{
	// PLAN → ROLLED_BACK: a move cancelled before it created anything.
	PhasePlan:         {PhaseJoining, PhaseRolledBack, PhaseFailed},
	PhaseJoining:      {PhaseSnapshotCopy, PhaseRollingBack, PhaseFailed},
	PhaseSnapshotCopy: {PhaseCDCCatchUp, PhaseRollingBack, PhaseFailed},
	PhaseCDCCatchUp:   {PhaseVerify, PhaseRollingBack, PhaseFailed},
	// VERIFY → VERIFY is a re-verify after a mismatch.
	PhaseVerify: {PhaseCutover, PhaseVerify, PhaseRollingBack, PhaseFailed},
	// CUTOVER → CDC_CATCH_UP is an aborted cutover (write-pause budget spent)
	// that catches up again before the next attempt.
	PhaseCutover:     {PhaseGrace, PhaseCDCCatchUp, PhaseRollingBack, PhaseFailed},
	PhaseGrace:       {PhaseCleanup, PhaseRollingBack, PhaseFailed},
	PhaseCleanup:     {PhaseDone, PhaseFailed},
	PhaseRollingBack: {PhaseRolledBack, PhaseFailed},
}

// Terminal reports whether nothing follows p.
func (p Phase) Terminal() bool { return p == PhaseDone || p == PhaseRolledBack || p == PhaseFailed }

// CanRollBack reports whether an operator rollback makes sense in p: any
// phase before CLEANUP (after it, a rollback is a new migration).
func (p Phase) CanRollBack() bool {
	for _, next := range transitions[p] {
		if next == PhaseRollingBack {
			return true
		}
	}
	return false
}

// Valid reports whether p is a known phase.
func (p Phase) Valid() bool {
	for _, q := range Phases {
		if p == q {
			return true
		}
	}
	return false
}

// Next checks the transition from p to next.
func (p Phase) Next(next Phase) error {
	for _, q := range transitions[p] {
		if q == next {
			return nil
		}
	}
	return fmt.Errorf("phase %s cannot go to %s", p, next)
}
