package statusview

import (
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
)

func TestNextStepsPrinted(t *testing.T) {
	var out strings.Builder
	PrintNextSteps(&out, []string{"reshard approve m4", "reshard rollback m4"})
	if out.String() != "next: reshard approve m4  |  reshard rollback m4\n" {
		t.Errorf("human next steps %q", out.String())
	}
	if got := strings.Join(ActionNextSteps("rollback", "m4"), ","); got != "reshard status m4 --watch" {
		t.Errorf("after rollback: %q", got)
	}
	if got := strings.Join(ActionNextSteps("pause", "m4"), ","); got != "reshard resume m4,reshard status m4" {
		t.Errorf("after pause: %q", got)
	}
}

// TestWatchLines: --watch without a terminal writes a line per change, the
// next steps when they change, and how the migration ended.
func TestWatchLines(t *testing.T) {
	var out strings.Builder
	w := NewWatch(&out, "m4", false)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	copying := workflows.MigrationState{Phase: workflows.PhaseSnapshotCopy, Moves: []workflows.MoveState{{Phase: workflows.PhaseSnapshotCopy}}}
	w.Show(copying, now)
	w.Show(copying, now) // no change: nothing more
	w.Show(workflows.MigrationState{Phase: workflows.PhaseDone}, now)
	got := out.String()
	for _, want := range []string{"03:04:05 migration SNAPSHOT_COPY\n", "03:04:05 next: reshard status m4 --watch\n", "03:04:05 migration DONE\n", "migration m4 ended: DONE\n"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("watch output lacks %q once:\n%s", want, got)
		}
	}
	if strings.Contains(got, "next: \n") || strings.HasSuffix(got, "next:") {
		t.Errorf("a done migration has no next steps:\n%s", got)
	}
}

func TestPendingPrinted(t *testing.T) {
	var out strings.Builder
	sent := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	PrintPending(&out, "pause", "p1", sent, false, sent.Add(90*time.Second))
	PrintPending(&out, "approve", "a1", sent, true, sent.Add(time.Second))
	want := "pending request: pause sent 03:04:05 (1m30s ago, --request-id p1), not applied yet: Temporal holds it until a worker runs the workflow\n" +
		"lost request: approve sent 03:04:05 (1s ago, --request-id a1) is no longer held by Temporal (its server restarted or the workflow ended before a worker took it): it was NOT applied; send it again if it is still wanted\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
}
