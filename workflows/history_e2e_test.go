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

// TestManyMovesHistoriesStayBounded runs a migration of movesPerRun+16
// moves — a full run of the parent and a continuation — on a Temporal dev
// server with the real workflows and every activity stubbed, then reads every
// history it wrote, each run of the parent and each Move, holds each to
// historyBound events and replays it against the current code. The SDK's
// test environment keeps no event history, so the bound is measured on a
// server. A run of the parent starts at most movesPerRun moves whatever the
// migration's size, so its history does not grow with the number of moves;
// make e2e runs the same with 1,000 moves (TestThousandMovesHistoriesStayBounded),
// every continuation of the parent among them: this one, 61 s of make test's
// workflows package in the last CI, moved behind the e2e tag, and
// -run '^TestManyMovesHistoriesStayBounded$' -tags e2e still runs it alone.
func TestManyMovesHistoriesStayBounded(t *testing.T) {
	checkManyMoves(t, movesPerRun+16)
}
