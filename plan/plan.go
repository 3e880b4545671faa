package plan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// Request is a migration as the planner sees it.
type Request struct {
	// Migration is the migration's id: it names the moves (topology.MoveID).
	// Empty in a dry run that names nothing: the moves have no ids.
	Migration string
	Change    ring.Change
}

// Plan is what a migration does to the topology it starts from.
type Plan struct {
	Migration string
	From      topology.Topology
	After     *ring.Ring
	// Moves are the planner's moves in token order; Grouped the same moves
	// as the workflow runs them, one per (source, target) pair in the order
	// the pairs first appear (topology.GroupMoves), with their ids.
	Moves   []ring.Move
	Grouped []topology.PlannedMove
	// Weights are the registry weights the migration sets at its end (nil:
	// none), as After has them.
	Weights map[string]float64
	// Moved is the moved fraction of the token space; Modulo what hash-mod-N
	// placement would move for the same change (0: not comparable); Ideal
	// the least any placement must move.
	Moved, Modulo, Ideal float64
	// Steps is what a rebalance moves one shard at a time (ring.PlanSteps),
	// in so many steps: the sequence of migrations it replaces.
	Steps     int
	StepMoved float64
}

// Stored is the plan as the control database keeps it (topology.SavePlan).
func (p Plan) Stored() topology.Plan {
	return topology.Plan{MigrationID: p.Migration, FromVersion: p.From.Version, Before: p.From.Ring, After: p.After,
		Moves: p.Moves, Weights: p.Weights}
}

// InputError is a request the plan refuses: no retry changes the answer.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func badInput(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// Make reads the keyspace's current topology and the shard registry from
// store and computes the plan of r (Compute). Errors a request causes are
// *InputError.
func Make(ctx context.Context, store *topology.Store, r Request) (Plan, error) {
	cur, err := store.Current(ctx)
	if errors.Is(err, topology.ErrNoTopology) {
		ks := store.Keyspace()
		return Plan{}, badInput("keyspace %s has no topology yet: run reshard init --keyspace %s first", ks, ks)
	}
	if err != nil {
		return Plan{}, fmt.Errorf("read the current topology: %w", err)
	}
	reg, err := Registry(ctx, store)
	if err != nil {
		return Plan{}, err
	}
	return Compute(cur, reg, r)
}

// Registry is the registered shards' weights and failure domains, which
// the planner applies.
func Registry(ctx context.Context, store *topology.Store) ([]ring.Shard, error) {
	shards, err := store.Shards(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the shard registry: %w", err)
	}
	var out []ring.Shard
	for _, sh := range shards {
		out = append(out, ring.Shard{Name: sh.Name, Weight: sh.Weight, Domain: sh.FailureDomain})
	}
	return out, nil
}

// Compute plans r on topology t with the one planner (ring.PlanChange) and
// the registry's weights reg. It refuses (*InputError) a topology with a
// migration in progress, shards the request names that the ring has or
// lacks the wrong way, and a plan that moves nothing.
func Compute(t topology.Topology, reg []ring.Shard, r Request) (Plan, error) {
	if m := t.Migrating(); len(m) > 0 {
		id := t.MigrationID
		if id == "" {
			id = "(unknown)"
		}
		return Plan{}, badInput("topology v%d has %d range(s) migrating (migration %s): wait for it to finish or roll it back first (reshard rollback %s; if its workflow has ended, reshard recover %s)", t.Version, len(m), id, id, id)
	}
	c := r.Change
	p := Plan{Migration: r.Migration, From: t}
	if err := p.checkShards(c); err != nil {
		return Plan{}, err
	}
	var err error
	if p.After, p.Moves, err = ring.PlanChange(t.Ring, reg, c); err != nil {
		return Plan{}, &InputError{Err: err}
	}
	if len(p.Moves) == 0 {
		return Plan{}, badInput("nothing to move: the ring already has that shape")
	}
	if c.Kind == "rebalance" {
		if err := p.oneAtATime(reg, c); err != nil {
			return Plan{}, &InputError{Err: err}
		}
	}
	p.Moved = ring.MovedFraction(p.Moves)
	if c.Kind == "move" || c.Kind == "rebalance" {
		p.Ideal = p.Moved // a rebalance moves the least possible (ring.PlanRebalance)
	}
	p.Grouped = topology.GroupMoves(r.Migration, p.Moves)
	if r.Migration == "" {
		for i := range p.Grouped {
			p.Grouped[i].ID = ""
		}
	}
	p.Weights = weights(p.After, c.Weights)
	return p, nil
}

// checkShards refuses shards the request names that the ring has (a new
// shard) or lacks (a shard to split, remove or reweigh), and sets the
// comparison figures Modulo and Ideal.
func (p *Plan) checkShards(c ring.Change) error {
	old, v := p.From.Ring, p.From.Version
	n := len(old.Shards())
	inRing := func(name, what string) error {
		if !old.HasShard(name) {
			return badInput("%s %s: topology v%d has no shard %s (shards: %s)", what, name, v, name, strings.Join(old.Shards(), ", "))
		}
		return nil
	}
	notInRing := func(name, what string) error {
		if old.HasShard(name) {
			return badInput("%s %s: topology v%d already has a shard %s; name a new shard", what, name, v, name)
		}
		return nil
	}
	share := old.Share()
	var errs []error
	switch c.Kind {
	case "add-node":
		errs = append(errs, notInRing(c.Shard, "add-node"))
		p.Modulo, p.Ideal = float64(n)/float64(n+1), 1/float64(n+1)
	case "split":
		errs = append(errs, inRing(c.Shard, "split"), notInRing(c.Into, "--into"))
		p.Modulo, p.Ideal = float64(n)/float64(n+1), share[c.Shard]/2
	case "remove-node":
		errs = append(errs, inRing(c.Shard, "remove-node"))
		if n == 1 && old.HasShard(c.Shard) {
			errs = append(errs, badInput("remove-node %s: it is the only shard; the ring needs at least one", c.Shard))
		}
		p.Modulo, p.Ideal = float64(n-1)/float64(n), share[c.Shard]
	case "move":
	case "rebalance":
		for _, name := range c.Add {
			errs = append(errs, notInRing(name, "--add"))
		}
		for _, name := range c.Remove {
			errs = append(errs, inRing(name, "--remove"))
		}
		for name := range c.Weights {
			if !slices.Contains(c.Add, name) {
				errs = append(errs, inRing(name, "--weight"))
			}
		}
	default:
		return badInput("unknown migration kind %q (add-node, split, remove-node, move, rebalance)", c.Kind)
	}
	for _, err := range errs {
		if err != nil {
			return err // the first, in the order the request names them
		}
	}
	return nil
}

// oneAtATime plans the same rebalance one shard at a time, on the same
// ring and weights, for the comparison in Steps and StepMoved.
func (p *Plan) oneAtATime(reg []ring.Shard, c ring.Change) error {
	var specs []ring.Shard
	for _, s := range reg {
		if p.From.Ring.HasShard(s.Name) {
			specs = append(specs, s)
		}
	}
	withReg, err := p.From.Ring.WithShards(specs)
	if err != nil {
		return err
	}
	steps, err := ring.PlanSteps(withReg, c.Target(), c.Opts)
	if err != nil {
		return err
	}
	p.Steps = len(steps)
	for _, st := range steps {
		p.StepMoved += ring.MovedFraction(st)
	}
	return nil
}

// weights are the weights the request sets, as the planned ring has them
// (ring.PlanChange): what the migration's end writes to the registry. nil
// when it sets none.
func weights(after *ring.Ring, set map[string]float64) map[string]float64 {
	if len(set) == 0 {
		return nil
	}
	out := make(map[string]float64, len(set))
	for name := range set {
		if after.HasShard(name) {
			out[name] = after.Spec(name).Weight
		}
	}
	return out
}

// Fraction is the share of the token space m's ranges cover.
func Fraction(m topology.PlannedMove) float64 { return ring.SpaceFraction(m.Ranges) }
