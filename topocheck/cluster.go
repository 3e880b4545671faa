package topocheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Keyspaces is what topology check and check placement look at: every
// registered keyspace, or the one named, with the control schema they read
// ready (fence holds; schema step 6, reshard.moves, says which moves still
// run). No keyspace, or a name that resolves to none, is an
// *pgerr.InputError; a failed read of the control database a *ControlError.
func Keyspaces(ctx context.Context, ctl fence.Control, name string) ([]topology.Keyspace, error) {
	all, err := ctl.Store.Keyspaces(ctx)
	if err != nil {
		return nil, &ControlError{err}
	}
	if len(all) == 0 {
		return nil, &pgerr.InputError{Err: topology.ErrNoKeyspace}
	}
	if name != "" {
		k, err := ctl.Store.ResolveKeyspace(ctx, name)
		if err != nil {
			return nil, &pgerr.InputError{Err: err}
		}
		all = []topology.Keyspace{k}
	}
	if err := topology.Migrate(ctx, ctl.Pool); err != nil {
		return nil, &ControlError{err}
	}
	return all, nil
}

// ClusterOptions says what topology check looks at.
type ClusterOptions struct {
	// Control is the control database (its Store in any keyspace).
	Control fence.Control
	// Keyspace is the one to check ("": every keyspace).
	Keyspace string
	// Shards are the configured shards, whose stream objects are listed.
	Shards     []string
	OpenShards func(ctx context.Context, names []string) (map[string]*pgxpool.Pool, func(), error)
	Live       Liveness
	Repair     bool
}

// Report is what topology check found in one keyspace.
type Report struct {
	Keyspace string            `json:"keyspace"`
	Of       topology.Keyspace `json:"-"`
	Shards   []Shard           `json:"shards"`
	// Ended: migrations whose workflow ended with moves not ended.
	Ended []EndedMigration `json:"ended_migrations,omitempty"`
	// Leftovers: slots, publications and origins no live move uses.
	Leftovers []Leftover `json:"leftovers,omitempty"`
	Notes     []string   `json:"notes,omitempty"`
}

// Cluster checks every keyspace (or o.Keyspace): Shards (reconciled with
// o.Repair), EndedMigrations and the Leftovers on o.Shards, which belong to
// the keyspace of their migration (objects no plan names, and notes, to the
// first keyspace). On an error, the reports of the keyspaces checked before
// it come with it.
func Cluster(ctx context.Context, o ClusterOptions) ([]Report, error) {
	all, err := Keyspaces(ctx, o.Control, o.Keyspace)
	if err != nil {
		return nil, err
	}
	left, leftNotes, err := Leftovers(ctx, o.Control.Store, o.Shards, func(ctx context.Context, shard string) ([]cdc.Object, error) {
		pools, closeAll, err := o.OpenShards(ctx, []string{shard})
		if err != nil {
			return nil, err
		}
		defer closeAll()
		return cdc.Objects(ctx, pools[shard])
	}, o.Live)
	if err != nil {
		return nil, &ControlError{err}
	}
	var out []Report
	for i, k := range all {
		ks := o.Control.Store.In(k.Name)
		r := Report{Keyspace: k.Name, Of: k, Leftovers: left[k.Name]}
		r.Shards, err = Shards(ctx, Options{Control: fence.Control{Pool: o.Control.Pool, Store: ks}, Keyspace: k, OpenShards: o.OpenShards, Repair: o.Repair})
		if err != nil {
			return out, err
		}
		if i == 0 { // objects no plan names belong to no keyspace
			r.Leftovers = append(r.Leftovers, left[""]...)
		}
		if r.Ended, r.Notes, err = EndedMigrations(ctx, ks, o.Live); err != nil {
			return out, &ControlError{err}
		}
		if i == 0 {
			r.Notes = append(r.Notes, leftNotes...)
		}
		out = append(out, r)
	}
	return out, nil
}

// Problems is topology check's verdict on its reports: nil, or what fails
// the check (shards that differ from the topology and were not repaired,
// misplaced or unplaced rows, migrations ended with work left, objects left
// behind). Shards in transition are not drift.
func Problems(reports []Report) error {
	bad, migrations, objects := 0, 0, 0
	for _, r := range reports {
		for _, c := range r.Shards {
			if len(c.Strays) > 0 || len(c.Unplaced) > 0 || (c.Drifting() && len(c.Repaired) == 0) {
				bad++
			}
		}
		migrations += len(r.Ended)
		objects += len(r.Leftovers)
	}
	var problems []string
	if bad > 0 {
		problems = append(problems, fmt.Sprintf("%d shard(s) differ from the topology", bad))
	}
	if migrations > 0 {
		problems = append(problems, fmt.Sprintf("%d migration(s) ended with work left", migrations))
	}
	if objects > 0 {
		problems = append(problems, fmt.Sprintf("%d slot(s), publication(s) or origin(s) left behind", objects))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Placement is what check placement found in one keyspace.
type Placement struct {
	Keyspace string            `json:"keyspace"`
	Of       topology.Keyspace `json:"-"`
	Version  int64             `json:"version"`
	// RunningMoves: moves not ended yet, whose two shards may both hold
	// their rows (not counted as misplaced).
	RunningMoves int                `json:"running_moves"`
	Shards       []PlacementOfShard `json:"shards"`
}

// PlacementOfShard is one shard's rows off their owner.
type PlacementOfShard struct {
	Shard   string        `json:"shard"`
	Skipped string        `json:"skipped,omitempty"`
	Strays  []fence.Stray `json:"misplaced,omitempty"`
	// Unplaced: rows with a NULL shard key, which no shard owns.
	Unplaced []tableset.NullKeyRows `json:"unplaced,omitempty"`
}

// Placements counts, in every keyspace (or the one named), the rows each
// shard holds off its owner and those with a NULL key (misplaced: their
// sum). It reads only. On an error, the keyspaces counted before it come
// with it.
func Placements(ctx context.Context, ctl fence.Control, keyspace string, open func(ctx context.Context, names []string) (map[string]*pgxpool.Pool, func(), error)) (out []Placement, misplaced int64, err error) {
	all, err := Keyspaces(ctx, ctl, keyspace)
	if err != nil {
		return nil, 0, err
	}
	for _, k := range all {
		ks := ctl.Store.In(k.Name)
		checks, err := Shards(ctx, Options{Control: fence.Control{Pool: ctl.Pool, Store: ks}, Keyspace: k, OpenShards: open})
		if err != nil {
			return out, misplaced, err
		}
		cur, err := ks.Current(ctx)
		if err != nil {
			return out, misplaced, &ControlError{err}
		}
		running, err := ks.RunningMoves(ctx)
		if err != nil {
			return out, misplaced, &ControlError{err}
		}
		r := Placement{Keyspace: k.Name, Of: k, Version: cur.Version, RunningMoves: len(running)}
		for _, c := range checks {
			r.Shards = append(r.Shards, PlacementOfShard{Shard: c.Shard, Skipped: c.Skipped, Strays: c.Strays, Unplaced: c.Unplaced})
			for _, s := range c.Strays {
				misplaced += s.Rows
			}
			for _, u := range c.Unplaced {
				misplaced += u.Rows
			}
		}
		out = append(out, r)
	}
	return out, misplaced, nil
}
