package topocheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Shard is what the check found on one shard.
type Shard struct {
	Shard  string        `json:"shard"`
	Want   fence.Want    `json:"want"`
	Have   []fence.Have  `json:"have"`
	Drift  []string      `json:"drift"`
	Strays []fence.Stray `json:"strays,omitempty"`
	// Unplaced: rows with a NULL shard key, which no shard owns.
	Unplaced []tableset.NullKeyRows `json:"unplaced,omitempty"`
	Repaired []string               `json:"repaired,omitempty"`
	Skipped  string                 `json:"skipped,omitempty"`
	// InTransition names the cutovers (or rollbacks' reverse cutovers)
	// midway on this shard while it was read: its fences change as they
	// go, so a difference from the topology is theirs, not drift (Drift
	// lists it; it is not repaired and does not fail the check).
	InTransition []string `json:"in_transition,omitempty"`
}

// Drifting: a difference no cutover in progress explains.
func (c Shard) Drifting() bool { return len(c.Drift) > 0 && len(c.InTransition) == 0 }

// ControlError is a failed read of the control database (the caller may
// explain a missing schema); its message is the cause's.
type ControlError struct{ Err error }

func (e *ControlError) Error() string { return e.Err.Error() }
func (e *ControlError) Unwrap() error { return e.Err }

// Options says what to check.
type Options struct {
	// Control is the control database, its Store In the keyspace checked.
	Control  fence.Control
	Keyspace topology.Keyspace
	// OpenShards connects to the named shards; the returned func closes
	// them.
	OpenShards func(ctx context.Context, names []string) (map[string]*pgxpool.Pool, func(), error)
	// Repair reconciles the fences and guards of every drifting shard.
	Repair bool
}

// Shards compares (and with Repair reconciles) every shard of the
// keyspace: the ring's, the ends of migrating ranges, and the registered
// ones (a registered shard that is not a member and was never fenced for
// the keyspace is Skipped). Sorted by shard name.
func Shards(ctx context.Context, o Options) ([]Shard, error) {
	store := o.Control.Store
	t, err := store.Current(ctx)
	if err != nil {
		return nil, &ControlError{err}
	}
	reg, err := store.Shards(ctx)
	if err != nil {
		return nil, &ControlError{err}
	}
	running, err := store.RunningMoves(ctx)
	if err != nil {
		return nil, &ControlError{err}
	}
	members, names := shardNames(t, reg)
	pools, closeAll, err := o.OpenShards(ctx, names)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	// The cutover journals of the running moves, read before and after the
	// shards: a cutover midway at either read, or that moved on between
	// them, changed fences under the look.
	journals, err := runningJournals(ctx, store, running)
	if err != nil {
		return nil, err
	}
	before, err := cutover.LastSteps(ctx, o.Control.Pool, slices.Collect(maps.Keys(journals)))
	if err != nil {
		return nil, err
	}
	sets := map[string]tableset.Set{}
	var out []Shard
	for _, n := range names {
		c, set, err := inspect(ctx, pools[n], o, t, running, n, members[n])
		if err != nil {
			return nil, err
		}
		if c.Skipped == "" {
			sets[n] = set
		}
		out = append(out, c)
	}
	after, err := cutover.LastSteps(ctx, o.Control.Pool, slices.Collect(maps.Keys(journals)))
	if err != nil {
		return nil, err
	}
	moving := cutover.InTransition(before, after, time.Now())
	for i := range out {
		c := &out[i]
		if len(c.Drift) == 0 {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(moving)) {
			if j := journals[name]; j.touches(c.Shard) {
				c.InTransition = append(c.InTransition, j.describe(moving[name]))
			}
		}
		if o.Repair && c.Drifting() { // never against a cutover in progress
			if err := repair(ctx, pools[c.Shard], c, sets[c.Shard], o.Control); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// shardNames are the shards checked, sorted: the registered ones and the
// keyspace's members (its ring's and the ends of migrating ranges).
func shardNames(t topology.Topology, reg []topology.Shard) (map[string]bool, []string) {
	members := map[string]bool{}
	for _, n := range t.Ring.Shards() {
		members[n] = true
	}
	for _, m := range t.Migrating() {
		members[m.From], members[m.To] = true, true
	}
	var names []string
	for _, s := range reg {
		names = append(names, s.Name)
	}
	for n := range members {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return members, names
}

// inspect reads one shard: its fences and guards against what the
// topology wants, its strays and its unplaced rows.
func inspect(ctx context.Context, pool *pgxpool.Pool, o Options, t topology.Topology, running []topology.RunningMove, n string, member bool) (Shard, tableset.Set, error) {
	c := Shard{Shard: n}
	set, err := tableset.Introspect(ctx, pool, o.Keyspace.Spec(), "shard "+n)
	if err != nil {
		var p *tableset.Problem
		if !member && errors.As(err, &p) {
			c.Skipped = "not in the ring and without the keyspace's tables"
			return c, set, nil
		}
		return c, set, err
	}
	if c.Have, err = fence.Inspect(ctx, pool, set); err != nil {
		return c, set, err
	}
	if !member && !slices.ContainsFunc(c.Have, func(h fence.Have) bool { return h.Trigger }) {
		c.Skipped = "not in the keyspace: not in its ring, never fenced for it"
		return c, set, nil
	}
	if c.Want, err = o.Control.Want(ctx, n); err != nil {
		return c, set, err
	}
	for _, d := range fence.Compare(n, c.Want, c.Have) {
		c.Drift = append(c.Drift, d.String())
	}
	if c.Strays, err = fence.Strays(ctx, pool, set, strayOutsideMoves(fence.StraySpace(t, n), n, running)); err != nil {
		return c, set, err
	}
	if c.Unplaced, err = tableset.NullKeys(ctx, pool, set); err != nil {
		return c, set, err
	}
	return c, set, nil
}

// repair reconciles a drifting shard and records what changed.
func repair(ctx context.Context, pool *pgxpool.Pool, c *Shard, set tableset.Set, ctl fence.Control) error {
	ch, err := fence.Reconcile(ctx, pool, c.Shard, set, ctl)
	if err != nil {
		return err
	}
	c.Repaired = append(append(append(c.Repaired, ch.Refenced...), ch.GuardsOn...), ch.GuardsOff...)
	for _, t := range ch.Recompiled {
		c.Repaired = append(c.Repaired, t+" (fence functions compiled again from the registry)")
	}
	if ch.Installed {
		c.Repaired = append(c.Repaired, "fence triggers installed")
	}
	return nil
}

// journalOf is a cutover journal of a running move: the forward cutover's
// or its rollback's reverse one.
type journalOf struct {
	move     topology.PlannedMove
	reversed bool
}

func (j journalOf) touches(shard string) bool { return j.move.From == shard || j.move.To == shard }

func (j journalOf) describe(l cutover.Last) string {
	what := fmt.Sprintf("the cutover of move %s (%s → %s)", j.move.ID, j.move.From, j.move.To)
	if j.reversed {
		what = fmt.Sprintf("the rollback's reverse cutover of move %s (%s → %s)", j.move.ID, j.move.To, j.move.From)
	}
	return fmt.Sprintf("%s, at step %s since %s", what, l.Step, l.At.UTC().Format("15:04:05"))
}

// runningJournals names the cutover journals of the keyspace's running
// moves, from their migrations' stored plans.
func runningJournals(ctx context.Context, store *topology.Store, running []topology.RunningMove) (map[string]journalOf, error) {
	out := map[string]journalOf{}
	plans := map[string][]topology.PlannedMove{}
	for _, r := range running {
		pm, ok := plans[r.MigrationID]
		if !ok {
			p, err := store.LoadPlan(ctx, r.MigrationID)
			if err != nil {
				return nil, &ControlError{err}
			}
			pm = p.PlannedMoves()
			plans[r.MigrationID] = pm
		}
		for _, m := range pm {
			if m.From == r.From && m.To == r.To {
				out[m.ID] = journalOf{move: m}
				out[rollback.ReverseJournal(m.ID)] = journalOf{move: m, reversed: true}
			}
		}
	}
	return out, nil
}

// strayOutsideMoves takes out of space the ranges of running moves from or
// to shard: a move's two shards both hold its rows until it ends, even once
// its ranges are published stable (cleanup deletes the old owner's rows
// after that publish).
func strayOutsideMoves(space []ring.Range, shard string, running []topology.RunningMove) []ring.Range {
	for _, m := range running {
		if m.From != shard && m.To != shard {
			continue
		}
		var left []ring.Range
		for _, r := range space {
			left = append(left, ring.Subtract(r, m.Ranges)...)
		}
		space = left
	}
	return ring.Normalize(space)
}
