package statusview

import (
	"slices"

	"github.com/reshard/reshard/workflows"
)

// NextSteps are the commands an operator would run next on a migration in
// state st, most likely first: what it waits for (approve, reverify,
// resume), what undoes it (rollback) or ends it (complete, recover), else
// how to follow it. status prints them and --json carries them as
// next_steps.
func NextSteps(id string, st workflows.MigrationState) []string {
	var steps []string
	add := func(verb string) {
		if s := "reshard " + verb + " " + id; !slices.Contains(steps, s) {
			steps = append(steps, s)
		}
	}
	switch st.Phase {
	case workflows.PhaseDone:
		return []string{}
	case workflows.PhaseRolledBack:
		return []string{"reshard topology check"}
	case workflows.PhaseFailed:
		add("recover")
		return steps
	}
	grace := false
	for _, m := range st.Moves {
		switch {
		case m.Phase.Terminal():
		case m.Stopped:
			add("resume")
			add("rollback")
		case m.Waiting == workflows.WaitVerdict:
			add("reverify")
			add("rollback")
		case m.Waiting == workflows.WaitApproval:
			add("approve")
			add("rollback")
		case m.Paused:
			add("resume")
		case m.Phase == workflows.PhaseGrace:
			grace = true
		}
	}
	if grace {
		add("complete")
		add("rollback")
	}
	if len(steps) == 0 {
		steps = append(steps, "reshard status "+id+" --watch")
	}
	return steps
}
