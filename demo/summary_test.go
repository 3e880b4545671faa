package demo

import (
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

// The demo's ETA line judges the first estimates shown by 25% copied and
// names the others late, and says when none could be judged.
func TestETALineJudgesEarlyEstimatesOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	move := func(id string, copyEnd time.Time) workflows.MoveState {
		return workflows.MoveState{Spec: workflows.MoveSpec{ID: id, Source: "shard" + id, Target: "shard5"},
			Timings: []workflows.PhaseTiming{{Phase: workflows.PhaseSnapshotCopy, Start: t0.Add(-time.Second), End: copyEnd}}}
	}
	moves := []workflows.MoveState{move("1", t0.Add(10*time.Second)), move("2", t0.Add(2*time.Second))}
	etas := map[string]*ETACheck{
		"1": {At: t0, End: t0.Add(9 * time.Second), Copied: 0.12},       // 9 s against 10 s: 10%
		"2": {At: t0, End: t0.Add(100 * time.Millisecond), Copied: 0.9}, // shown at 90%: 95% off, late
	}
	got := etaLine(moves, etas)
	for _, want := range []string{"shard1→shard5 at 12% 9s vs 10s (10%)", "shard2→shard5 at 90% 100ms vs 2s (95%, late)",
		"worst error 10% over the 1 shown by 25% copied"} {
		if !strings.Contains(got, want) {
			t.Errorf("ETA line %q lacks %q", got, want)
		}
	}
	delete(etas, "1")
	if got := etaLine(moves, etas); !strings.Contains(got, "not judged: no first estimate by 25% copied") {
		t.Errorf("ETA line with only a late estimate: %q", got)
	}
	etas["1"] = &ETACheck{At: t0, End: t0.Add(12 * time.Second), Copied: 0.1}
	delete(etas, "2")
	if got := etaLine(moves, etas); !strings.HasSuffix(got, "; worst error 20%") {
		t.Errorf("ETA line with every estimate judged: %q", got)
	}
	if got := etaLine(moves, nil); got != "" {
		t.Errorf("ETA line without estimates: %q", got)
	}
}
