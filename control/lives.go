package control

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/topology"
)

// Lives asks Temporal, once per migration and only when asked, whether a
// workflow of the migration runs (its Migration workflow or one of its
// moves'): topology check's topocheck.Liveness. It dials on the first
// question; Close closes what it dialed.
type Lives struct {
	Dial  func(ctx context.Context) (client.Client, error)
	Store *topology.Store // the stored plans name the moves

	tc     client.Client
	dialed bool
	err    error
	seen   map[string]runState
}

// runState is what Temporal says of a migration's workflows.
type runState struct {
	runs   bool
	status string // how it ended, when it does not run
	err    error  // Temporal could not tell
}

// Close closes the client Ask dialed.
func (l *Lives) Close() {
	if l.tc != nil {
		l.tc.Close()
	}
}

// Ask is topocheck.Liveness: whether a workflow of migration id runs, and
// how it ended when none does, asked of Temporal once per migration.
func (l *Lives) Ask(ctx context.Context, id string) (bool, string, error) {
	st, ok := l.seen[id]
	if !ok {
		if !l.dialed {
			l.dialed = true
			l.tc, l.err = l.Dial(ctx)
		}
		st = runState{err: l.err}
		if l.err == nil {
			st = l.describe(ctx, id)
		}
		if l.seen == nil {
			l.seen = map[string]runState{}
		}
		l.seen[id] = st
	}
	return st.runs, st.status, st.err
}

func (l *Lives) describe(ctx context.Context, id string) runState {
	var moves []string
	if p, err := l.Store.LoadPlan(ctx, id); err == nil {
		for _, m := range p.PlannedMoves() {
			moves = append(moves, m.ID)
		}
	}
	lv, err := MigrationRuns(ctx, l.tc, id, moves, 10*time.Second)
	switch {
	case err != nil:
		return runState{err: errors.Unwrap(err)} // the workflow is not named in the note
	case lv.Running != "":
		return runState{runs: true}
	case !lv.Migration.Found:
		return runState{status: "not found: its history is lost"}
	}
	st := runState{status: lv.Migration.Status}
	if lv.Migration.Phase != "" {
		st.status += " in " + lv.Migration.Phase
	}
	return st
}
