//go:build e2e

package workflows

import "testing"

// TestThousandMovesHistoriesStayBounded is a migration of 1,000 moves with the
// real workflows and every activity stubbed, on a Temporal dev server: every
// history (each of the parent's 8 runs, each Move) stays under historyBound
// events and replays. Long (5 to 16 minutes here on 2 shared cores): make e2e
// runs it. Measured: the parent's runs 1,668 to 2,321 events, the largest
// Move 124.
func TestThousandMovesHistoriesStayBounded(t *testing.T) {
	checkManyMoves(t, 1000)
}
