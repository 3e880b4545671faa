package workflows

// Repairable splits the moves of s (only the move named, when move is not
// "") into those reshard verify --repair may rewrite now and why each of
// the others may not (MoveState.RepairRefusal).
func (s MigrationState) Repairable(move string) (chosen []MoveState, refusals []string) {
	for _, m := range s.Moves {
		if move != "" && m.Spec.ID != move {
			continue
		}
		if why := m.RepairRefusal(); why != "" {
			refusals = append(refusals, why)
			continue
		}
		chosen = append(chosen, m)
	}
	return chosen, refusals
}
