package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/topology"
)

// endedMigration is a migration whose workflow has ended with moves not
// ended: its ranges stay migrating and its streams, copies and guards stay
// until reshard recover.
type endedMigration struct {
	Migration string `json:"migration"`
	// Workflow is how its workflow ended: terminated, failed, not found ...
	Workflow string `json:"workflow"`
	Moves    int    `json:"moves_not_ended"`
	// Migrating is the number of ranges the current topology has migrating.
	Migrating int    `json:"ranges_migrating"`
	Fix       string `json:"fix"`
}

// leftover is a slot, publication or origin of a move's stream that no
// live move uses.
type leftover struct {
	Shard string `json:"shard"`
	cdc.Object
	Move      string `json:"move,omitempty"`
	Migration string `json:"migration,omitempty"`
	Fix       string `json:"fix"`
}

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

func (l *liveness) state(ctx context.Context, id string) runState {
	if st, ok := l.seen[id]; ok {
		return st
	}
	if !l.dialed {
		l.dialed = true
		l.tc, l.err = l.cfg.dialTemporal(ctx, l.opts)
	}
	st := runState{err: l.err}
	if l.err == nil {
		st = l.ask(ctx, id)
	}
	if l.seen == nil {
		l.seen = map[string]runState{}
	}
	l.seen[id] = st
	return st
}

func (l *liveness) ask(ctx context.Context, id string) runState {
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
// whose workflow has ended; migrations Temporal cannot tell about are
// noted in unknown.
func endedMigrations(ctx context.Context, ks *topology.Store, live *liveness) (ended []endedMigration, unknown []string, err error) {
	running, err := ks.RunningMoves(ctx)
	if err != nil {
		return nil, nil, controlErr(err)
	}
	cur, err := ks.Current(ctx)
	if err != nil {
		return nil, nil, controlErr(err)
	}
	n := map[string]int{}
	var ids []string
	for _, m := range running {
		if n[m.MigrationID] == 0 {
			ids = append(ids, m.MigrationID)
		}
		n[m.MigrationID]++
	}
	for _, id := range ids {
		st := live.state(ctx, id)
		switch {
		case st.err != nil:
			unknown = append(unknown, fmt.Sprintf("migration %s has %d move(s) not ended; Temporal cannot say whether its workflow runs (%v)", id, n[id], st.err))
		case !st.runs:
			e := endedMigration{Migration: id, Workflow: st.status, Moves: n[id], Fix: "reshard recover " + id}
			if cur.MigrationID == id {
				e.Migrating = len(cur.Migrating())
			}
			ended = append(ended, e)
		}
	}
	return ended, unknown, nil
}

// leftovers lists, on every configured shard, the slots, publications and
// origins of moves that no live move uses: moves of a migration whose
// workflows have ended (recover drops them), or of no stored plan. A
// migration Temporal cannot tell about is given the benefit of the doubt.
// They come by the keyspace of their migration ("" for a move no plan
// names). A configured shard that cannot be read is noted, not an error:
// it may be down or not set up yet, and the keyspace checks say what they
// need.
func leftovers(ctx context.Context, cfg *clusterConfig, store *topology.Store, live *liveness) (map[string][]leftover, []string, error) {
	index, err := store.MoveIndex(ctx)
	if err != nil {
		return nil, nil, controlErr(err)
	}
	names := make([]string, 0, len(cfg.Shards))
	for n := range cfg.Shards {
		names = append(names, n)
	}
	slices.Sort(names)
	var notes []string
	keyspaceOf := map[string]string{}
	out := map[string][]leftover{} // by keyspace
	for _, shard := range names {
		objs, err := shardObjects(ctx, cfg, shard)
		if err != nil {
			notes = append(notes, fmt.Sprintf("shard %s: cannot list its slots, publications and origins: %v", shard, err))
			continue
		}
		for _, o := range objs {
			lo := leftover{Shard: shard, Object: o}
			move, _, ok := cdc.MoveOf(o.Name, func(m string) bool { _, known := index[m]; return known })
			if !ok {
				lo.Fix = fmt.Sprintf("no stored plan names its move: drop it on %s if nothing uses it (%s)", shard, o.DropSQL())
				out[""] = append(out[""], lo)
				continue
			}
			lo.Move, lo.Migration = move, index[move]
			st := live.state(ctx, lo.Migration)
			if st.runs || st.err != nil {
				continue
			}
			ks, seen := keyspaceOf[lo.Migration]
			if !seen {
				if start, err := store.FindMigration(ctx, lo.Migration); err == nil {
					ks = start.Keyspace
				}
				keyspaceOf[lo.Migration] = ks
			}
			lo.Fix = "reshard recover " + lo.Migration
			out[ks] = append(out[ks], lo)
		}
	}
	return out, notes, nil
}

// shardObjects lists one configured shard's stream objects (cdc.Objects).
func shardObjects(ctx context.Context, cfg *clusterConfig, shard string) ([]cdc.Object, error) {
	p, err := cfg.connect(ctx, "shard "+shard, cfg.Shards[shard])
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return cdc.Objects(ctx, p)
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
