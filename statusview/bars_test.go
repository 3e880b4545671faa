package statusview

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// TestWatchBarsKeepTheirWidth: a move whose phase text is long (waiting for
// approval, a failover) keeps a bar of most of the line in --watch; the
// phase's text and the figures go on the line under it, cut to the width.
// Before, the phase's whole text and the figures shared the bar's line of
// 100 columns, and the bar shrank to nothing.
func TestWatchBarsKeepTheirWidth(t *testing.T) {
	now := time.Now()
	st := workflows.MigrationState{Phase: workflows.PhaseCutover, Moves: []workflows.MoveState{
		{
			Spec:  workflows.MoveSpec{ID: "m1", Source: "shard1", Target: "shard5", EstRows: 12000},
			Phase: workflows.PhaseCutover, RowsCopied: 6000, Waiting: workflows.WaitApproval,
			Failover: "source shard1 failed over in CDC_CATCH_UP at 12:00:00 (timeline 1 → 2): repaired 2 of 8 chunks, 14 rows copied, 1 deleted",
		},
		{
			Spec:  workflows.MoveSpec{ID: "m2", Source: "shard2", Target: "shard5", EstRows: 12000},
			Phase: workflows.PhaseSnapshotCopy, RowsCopied: 3000,
		},
	}}
	var out bytes.Buffer
	v := NewBars(&out, "walk")
	v.Update("walk", st, now)
	time.Sleep(500 * time.Millisecond) // two refreshes at 200 ms
	v.Stop()
	text := out.String()
	bar := regexp.MustCompile(`\[[=>\- ]*\]`)
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "shard1 → shard5") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		t.Fatalf("no line for the move:\n%s", text)
	}
	last := lines[len(lines)-1]
	if b := bar.FindString(last); len(b) < 50 {
		t.Errorf("the bar of a move waiting for approval is %d columns (want ≥ 50): %q", len(b), last)
	}
	if !strings.Contains(last, "CUTOVER") || strings.Contains(last, "approval") {
		t.Errorf("the bar's line should hold the phase's name only: %q", last)
	}
	if !strings.Contains(text, "waiting for approval: reshard approve") {
		t.Errorf("the phase's text is not under the bar:\n%s", text)
	}
	for _, l := range strings.Split(text, "\n") {
		if w := len([]rune(strings.TrimRight(l, "\r"))); w > 100 {
			t.Errorf("a line of %d columns in a view of 100: %q", w, l)
		}
	}
}
