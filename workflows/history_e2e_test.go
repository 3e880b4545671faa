//go:build e2e

package workflows

import "testing"

// TestThousandMovesHistoriesStayBounded is a migration of 1,000 moves with the
// real workflows and every activity stubbed, on a Temporal dev server: every
// history (each of the parent's 8 runs, each Move) stays under historyBound
// events and replays. Long (tens of minutes on 2 busy cores): make e2e runs
// it.
func TestThousandMovesHistoriesStayBounded(t *testing.T) {
	checkManyMoves(t, 1000)
}
