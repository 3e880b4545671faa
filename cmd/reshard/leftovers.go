package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/topocheck"
	"github.com/reshard/reshard/topology"
)

// endedMigration and leftover are what topology check reports of ended
// migrations and their streams' objects (topocheck).
type (
	endedMigration = topocheck.EndedMigration
	leftover       = topocheck.Leftover
)

// runState is what Temporal says of a migration's workflows.
type runState struct {
	runs   bool
	status string // how it ended, when it does not run
	err    error  // Temporal could not tell
}

// liveness asks Temporal, once per migration and only when asked, whether
// a workflow of the migration runs (its Migration workflow or one of its
// moves').
type liveness struct {
	cfg    *clusterConfig
	opts   *globalOptions
	store  *topology.Store
	tc     client.Client
	dialed bool
	err    error
	seen   map[string]runState
}

func (l *liveness) close() {
	if l.tc != nil {
		l.tc.Close()
	}
}

// ask is topocheck.Liveness: whether a workflow of migration id runs, and
// how it ended when none does, asked of Temporal once per migration.
func (l *liveness) ask(ctx context.Context, id string) (bool, string, error) {
	st, ok := l.seen[id]
	if !ok {
		if !l.dialed {
			l.dialed = true
			l.tc, l.err = l.cfg.dialTemporal(ctx, l.opts)
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

func (l *liveness) describe(ctx context.Context, id string) runState {
	var moves []string
	if p, err := l.store.LoadPlan(ctx, id); err == nil {
		for _, m := range p.PlannedMoves() {
			moves = append(moves, m.ID)
		}
	}
	lv, err := control.MigrationRuns(ctx, l.tc, id, moves, 10*time.Second)
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

// endedMigrations are the migrations of the keyspace with moves not ended
// whose workflow has ended (topocheck.EndedMigrations).
func endedMigrations(ctx context.Context, ks *topology.Store, live *liveness) ([]endedMigration, []string, error) {
	ended, unknown, err := topocheck.EndedMigrations(ctx, ks, live.ask)
	if err != nil {
		return nil, nil, controlErr(err)
	}
	return ended, unknown, nil
}

// leftovers lists, on every configured shard, the stream objects of moves
// no live move uses (topocheck.Leftovers).
func leftovers(ctx context.Context, cfg *clusterConfig, store *topology.Store, live *liveness) (map[string][]leftover, []string, error) {
	out, notes, err := topocheck.Leftovers(ctx, store, cfg.ShardNames(), func(ctx context.Context, shard string) ([]cdc.Object, error) {
		p, err := cfg.connect(ctx, "shard "+shard, cfg.Shards[shard])
		if err != nil {
			return nil, err
		}
		defer p.Close()
		return cdc.Objects(ctx, p)
	}, live.ask)
	if err != nil {
		return nil, nil, controlErr(err)
	}
	return out, notes, nil
}

func printEnded(out io.Writer, ended []endedMigration, unknown []string, left []leftover) {
	for _, e := range ended {
		fmt.Fprintf(out, "migration %s: its workflow has ended (%s) with %d move(s) not ended and %d range(s) migrating; fix: %s\n",
			e.Migration, e.Workflow, e.Moves, e.Migrating, e.Fix)
	}
	for _, u := range unknown {
		fmt.Fprintf(out, "note: %s\n", u)
	}
	for _, l := range left {
		state := ""
		if l.Kind == "slot" {
			state = " (inactive, retaining WAL)"
			if l.Active {
				state = " (active)"
			}
		}
		of := ""
		if l.Move != "" {
			of = fmt.Sprintf(" of move %s of migration %s, which has ended", l.Move, l.Migration)
		}
		fmt.Fprintf(out, "%-10s left behind: %s %s%s%s; fix: %s\n", l.Shard, l.Kind, l.Name, state, of, l.Fix)
	}
}
