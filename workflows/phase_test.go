package workflows

import (
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

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

// The copy's ETA, as status and the UI's details show it: the copy's own
// estimate of its end less the reader's clock (so a figure read later is
// no older), else the rate since the copy started, else the throttle.
func TestETAText(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	copying := MoveState{Spec: MoveSpec{EstRows: 1000}, Phase: PhaseSnapshotCopy, RowsCopied: 100, UpdatedAt: now,
		Timings: []PhaseTiming{{Phase: PhaseSnapshotCopy, Start: now.Add(-10 * time.Second)}}}
	with := func(f func(*MoveState)) MoveState { m := copying; f(&m); return m }
	for _, tc := range []struct {
		name string
		m    MoveState
		t    Throttle
		want string
	}{
		{"own estimate", with(func(m *MoveState) { m.CopyEnd = now.Add(42 * time.Second) }), Throttle{}, "42s"},
		{"own estimate, due", with(func(m *MoveState) { m.CopyEnd = now.Add(-3 * time.Second) }), Throttle{}, "0s"},
		{"since the start", copying, Throttle{}, "1m30s"},
		{"throttle before any row", with(func(m *MoveState) { m.RowsCopied, m.Timings = 0, nil }), Throttle{RowsPerSec: 100}, "10s"},
		{"nothing tells", with(func(m *MoveState) { m.RowsCopied, m.Timings = 0, nil }), Throttle{}, "?"},
		{"paused", with(func(m *MoveState) { m.Paused, m.CopyEnd = true, now.Add(time.Minute) }), Throttle{}, "paused"},
		{"copied", with(func(m *MoveState) { m.CopyDone, m.CopyEnd = true, now.Add(time.Minute) }), Throttle{}, "-"},
	} {
		if got := tc.m.ETAText(tc.t, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	table := movesTable([]MoveState{with(func(m *MoveState) { m.CopyEnd = now.Add(42 * time.Second) })}, Throttle{}, now)
	if !strings.Contains(table, "rows copied 100 / 1000 · copy ETA 42s · lag") {
		t.Errorf("the UI's table lacks the ETA status shows:\n%s", table)
	}
}

// TestUIDetailsListsEscaped: the UI's current details list each move on a
// line of its own with the long texts (the GRACE deadline, a failed
// verify's samples) under it, escape Markdown (SNAPSHOT_COPY and qs_add5_m4
// lost their underscores to emphasis), and draw no table (UI 2.42 clips a
// table's row to one line: the screenshots showed "shard1 → shard5" cut in
// half and the underscores gone); a Move has details of its own ("No
// details available").
func TestUIDetailsListsEscaped(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	moves := []MoveState{
		{Spec: MoveSpec{ID: "qs_add5_m4", Source: "shard1", Target: "shard5", EstRows: 1000}, Phase: PhaseSnapshotCopy, Paused: true, RowsCopied: 10},
		{Spec: MoveSpec{ID: "qs_add5_m5", Source: "shard2", Target: "shard5"}, Phase: PhaseVerify, Waiting: WaitVerdict,
			Verify: &VerifySummary{Mismatches: 3, Samples: []string{"missing public.users key=[42]", "extra public.users key=[43]"}}},
		{Spec: MoveSpec{ID: "qs_add5_m6", Source: "shard3", Target: "shard5"}, Phase: PhaseGrace, GraceUntil: now.Add(time.Hour),
			Pauses: WritePauses{Attempts: 2, Total: 300 * time.Millisecond, Longest: 200 * time.Millisecond}},
	}
	table := movesTable(moves, Throttle{}, now)
	for _, want := range []string{"- **qs\\_add5\\_m4** shard1 → shard5 (0 ranges): **SNAPSHOT\\_COPY**\n  - rows copied 10 / 1000 ·",
		"  - verify FAILED: 3 mismatch\\(es\\) ·", "**GRACE**", "write pause 300ms \\(2 tries\\)",
		`  - SNAPSHOT\_COPY \(paused\)`, `  - verify: FAILED: 3 mismatch\(es\) e.g. missing public.users key=\[42\]`,
		`  - GRACE \(until 2026-01-01T11:00:00Z; reshard complete ends it now\)`} {
		if !strings.Contains(table, want) {
			t.Errorf("the UI's details lack %s:\n%s", want, table)
		}
	}
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "|") {
			t.Errorf("a table row: %q", line)
		}
	}
	d := moveDetails(MigrationRequest{ID: "qs_add5", Tables: tableset.Spec{Name: "users"}}, MoveSpec{ID: "qs_add5_m4", Source: "shard1", Target: "shard5",
		Ranges: []ring.Range{{Lo: 1, Hi: 2}, {Lo: 3, Hi: 4}, {Lo: 5, Hi: 6}, {Lo: 7, Hi: 8}}, EstRows: 1200}, Throttle{RowsPerSec: 500})
	for _, want := range []string{`### move qs\_add5\_m4 of migration qs\_add5`, "shard1 → shard5: 4 token range(s), about 1200 rows", "and 1 more", "Throttle at the start: 500 rows/s"} {
		if !strings.Contains(d, want) {
			t.Errorf("a Move's static details lack %q:\n%s", want, d)
		}
	}
}
