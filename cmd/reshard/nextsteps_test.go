package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/reshard/reshard/planview"
	"github.com/reshard/reshard/workflows"
)

// TestNextSteps: the commands an operator runs next, for each state a
// migration waits in (pscale's next_steps).
func TestNextSteps(t *testing.T) {
	mv := func(p workflows.Phase, f func(*workflows.MoveState)) workflows.MoveState {
		m := workflows.MoveState{Phase: p}
		if f != nil {
			f(&m)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		st    workflows.MigrationState
		steps string
	}{
		{"copying", workflows.MigrationState{Phase: workflows.PhaseSnapshotCopy, Moves: []workflows.MoveState{mv(workflows.PhaseSnapshotCopy, nil)}},
			"reshard status m4 --watch"},
		{"paused", workflows.MigrationState{Phase: workflows.PhaseSnapshotCopy, Moves: []workflows.MoveState{mv(workflows.PhaseSnapshotCopy, func(m *workflows.MoveState) { m.Paused = true })}},
			"reshard resume m4"},
		{"verify failed", workflows.MigrationState{Phase: workflows.PhaseVerify, Moves: []workflows.MoveState{
			mv(workflows.PhaseVerify, func(m *workflows.MoveState) { m.Waiting = workflows.WaitVerdict }), mv(workflows.PhaseCDCCatchUp, nil)}},
			"reshard reverify m4,reshard rollback m4"},
		{"approval", workflows.MigrationState{Phase: workflows.PhaseCutover, Moves: []workflows.MoveState{
			mv(workflows.PhaseCutover, func(m *workflows.MoveState) { m.Waiting = workflows.WaitApproval })}},
			"reshard approve m4,reshard rollback m4"},
		{"stopped", workflows.MigrationState{Phase: workflows.PhaseSnapshotCopy, Moves: []workflows.MoveState{
			mv(workflows.PhaseSnapshotCopy, func(m *workflows.MoveState) { m.Stopped = true })}},
			"reshard resume m4,reshard rollback m4"},
		{"grace", workflows.MigrationState{Phase: workflows.PhaseGrace, Moves: []workflows.MoveState{mv(workflows.PhaseGrace, nil), mv(workflows.PhaseDone, nil)}},
			"reshard complete m4,reshard rollback m4"},
		{"done", workflows.MigrationState{Phase: workflows.PhaseDone}, ""},
		{"rolled back", workflows.MigrationState{Phase: workflows.PhaseRolledBack}, "reshard topology check"},
		{"failed", workflows.MigrationState{Phase: workflows.PhaseFailed}, "reshard recover m4"},
	} {
		if got := strings.Join(nextSteps("m4", tc.st), ","); got != tc.steps {
			t.Errorf("%s: next steps %q, want %q", tc.name, got, tc.steps)
		}
	}
	// --json carries them, [] when there is nothing to do (not null).
	b, err := json.Marshal(statusJSON{ID: "m4", NextSteps: nextSteps("m4", workflows.MigrationState{Phase: workflows.PhaseDone})})
	if err != nil || !strings.Contains(string(b), `"next_steps":[]`) {
		t.Errorf("status --json: %s %v", b, err)
	}
}

// TestPlanNextStepIsTheStart: plan's next step is the command that starts
// the migration it shows: the verb, arguments and flags, without plan and
// --json.
func TestPlanNextStepIsTheStart(t *testing.T) {
	opts := &globalOptions{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cmd := newMigrationCmd(opts, workflows.KindSplit, true)
	if err := cmd.ParseFlags([]string{"--into", "shard5", "--table", "users:id", "--table", "orders:user_id", "--json", "--rows-per-sec", "500"}); err != nil {
		t.Fatal(err)
	}
	got := planview.NextSteps(startCommand(cmd, []string{"shard1"}), 0)
	want := "reshard split shard1 --into shard5 --rows-per-sec 500 --table users:id --table orders:user_id"
	if len(got) != 1 || got[0] != want {
		t.Errorf("plan next step %q\nwant %q", got, want)
	}
	if got := planview.NextSteps(startCommand(cmd, []string{"shard1"}), 2); got[0] != "reshard plan"+strings.TrimPrefix(want, "reshard") {
		t.Errorf("with problems: %q", got)
	}
}
