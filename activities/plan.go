package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// Plan computes a migration's moves from the current topology with the ring
// planners, one MoveSpec per (source, target) pair, and runs the PLAN checks
// of every pair. It changes nothing. Any failed check is a non-retryable
// error listing every problem with its fix.
func (a *Activities) Plan(ctx context.Context, req workflows.MigrationRequest) (workflows.PlanResult, error) {
	defer keepBeating(ctx, 5*time.Second, func() any { return "planning" })()
	res, err := a.plan(ctx, req)
	return res, classify(err)
}

func (a *Activities) plan(ctx context.Context, req workflows.MigrationRequest) (workflows.PlanResult, error) {
	if err := checkRequest(req); err != nil {
		return workflows.PlanResult{}, err
	}
	store, err := a.store(ctx, req.Keyspace)
	if err != nil {
		return workflows.PlanResult{}, err
	}
	// Every migration moves every table of its keyspace (a cluster set up
	// before keyspaces has none registered: its tables are the request's).
	if k, err := store.ResolveKeyspace(ctx, store.Keyspace()); err == nil {
		if same, diff := topology.SameTables(k.Tables, req.Tables.Tables); !same {
			return workflows.PlanResult{}, badInput("the migration's tables differ from keyspace %s: it %s; every migration moves every table of its keyspace", k.Name, diff)
		}
	} else if !errors.Is(err, topology.ErrNoKeyspace) {
		return workflows.PlanResult{}, fmt.Errorf("read the keyspace: %w", err)
	}
	c, err := req.Change()
	if err != nil {
		return workflows.PlanResult{}, badInput("%v", err)
	}
	p, err := plan.Make(ctx, store, plan.Request{Migration: req.ID, Change: c})
	if err != nil {
		return workflows.PlanResult{}, planErr(err)
	}
	if !req.DryRun {
		// Computed once, here; every later step reads it.
		if err := store.SavePlan(ctx, p.Stored()); err != nil {
			return workflows.PlanResult{}, badInput("%v", err)
		}
	}
	chk, err := plan.Checks(ctx, a.pools.shard, p, PlanChecks(req, a.CapacityWALWindow, a.budgetsNow()))
	if err != nil {
		return workflows.PlanResult{}, err
	}
	res := workflows.PlanResult{FromVersion: p.From.Version, MovedFraction: p.Moved, EstRows: chk.Rows, EstBytes: chk.Bytes, ETA: chk.ETA}
	var problems []string
	for _, mr := range chk.Moves {
		m := mr.Move
		for _, pb := range mr.Problems {
			problems = append(problems, fmt.Sprintf("move %s (%s → %s): %s", m.ID, m.From, m.To, pb.Error()))
		}
		for _, w := range mr.Warnings {
			res.Warnings = append(res.Warnings, fmt.Sprintf("move %s: %v", m.ID, w))
		}
		res.Moves = append(res.Moves, workflows.MoveSpec{ID: m.ID, Source: m.From, Target: m.To, Ranges: m.Ranges,
			EstRows: mr.Rows(), EstBytes: mr.Bytes(), EstTables: tableEstimates(mr.Estimates)})
	}
	if crep := chk.Capacity; crep != nil { // what the moves will cost, and what cannot fit
		predicted(res.Moves, *crep)
		for _, r := range crep.Refusals {
			problems = append(problems, "capacity: "+r.Error())
		}
		if !req.DryRun {
			if err := store.SavePlanCapacity(ctx, req.ID, capacityJSON(*crep)); err != nil {
				return workflows.PlanResult{}, err
			}
		}
	}
	if len(problems) > 0 {
		return workflows.PlanResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("preflight found %d problems; nothing was changed:\n  %s", len(problems), strings.Join(problems, "\n  ")),
			workflows.ErrTypePreflight, nil)
	}
	return res, nil
}

// PlanChecks are the settings of req that PLAN's checks read
// (plan.Checks), with the capacity probe's WAL window and the shards'
// budgets: the worker's PLAN and the CLI's dry run take them from here.
func PlanChecks(req workflows.MigrationRequest, walWindow time.Duration, budgets map[string]capacity.Budget) plan.CheckOptions {
	r := req.WithDefaults()
	return plan.CheckOptions{Tables: r.Tables, Capacity: capacity.AssessOptions{
		Options: capacity.Options{RowsPerSec: r.Throttle.RowsPerSec, BytesPerSec: r.Throttle.BytesPerSec,
			MaxParallelMoves: r.MaxParallelMoves, MaxMovesPerShard: r.MaxMovesPerShard, CutoverBudget: r.CutoverBudget,
			StreamDuringCopy: r.StreamDuringCopy},
		Probe:     capacity.ProbeOptions{ChunkRows: r.ChunkRows, VerifyRows: r.VerifyChunkRows},
		WALWindow: walWindow, Budgets: budgets,
	}}
}

// planErr makes the plan's refusals bad input; a database error stays
// retryable.
func planErr(err error) error {
	var in *plan.InputError
	if errors.As(err, &in) {
		return badInput("%v", err)
	}
	return err
}

// PreflightMove re-runs the PLAN checks of one move (its child workflow's
// PLAN phase): the servers may have changed since the migration was planned.
func (a *Activities) PreflightMove(ctx context.Context, m workflows.MoveRef) error {
	defer keepBeating(ctx, 5*time.Second, func() any { return "preflight" })()
	mv := topology.PlannedMove{ID: m.Spec.ID, From: m.Spec.Source, To: m.Spec.Target, Ranges: m.Spec.Ranges}
	rep, err := plan.Preflight(ctx, a.pools.shard, m.Tables, []topology.PlannedMove{mv}, plan.Throttle{})
	if err != nil {
		return classify(err)
	}
	var msgs []string
	for _, p := range rep.Moves[0].Problems {
		msgs = append(msgs, p.Error())
	}
	if m.Request != nil && m.Request.StreamDuringCopy {
		for _, pb := range backfill.StreamDuringCopyProblems(rep.Moves[0].Source, m.Spec.Source) {
			msgs = append(msgs, pb.Error())
		}
	}
	if err := a.preflightStandby(ctx, m); err != nil {
		if pgerr.Retryable(err) {
			return classify(err)
		}
		msgs = append(msgs, err.Error())
	}
	if len(msgs) > 0 {
		return temporal.NewNonRetryableApplicationError("preflight of move "+m.Spec.ID+" failed; nothing was changed:\n  "+strings.Join(msgs, "\n  "),
			workflows.ErrTypePreflight, nil)
	}
	return nil
}

// checkRequest refuses a request the worker cannot plan: no id, no tables,
// or what workflows.MigrationRequest.Validate refuses (the CLI's check).
func checkRequest(req workflows.MigrationRequest) error {
	if req.ID == "" {
		return badInput("the migration has no id")
	}
	if len(req.Tables.Tables) == 0 {
		return badInput("the migration names no tables: give the table set (tables and their shard-key columns)")
	}
	if err := req.Validate(); err != nil {
		return badInput("%v", err)
	}
	return nil
}

// storedPlan reads the migration's stored plan. A migration started before
// plans were stored has none: its plan is computed from its FromVersion
// (the planner is deterministic) and stored, once.
func storedPlan(ctx context.Context, store *topology.Store, id string, fromVersion int64, req workflows.MigrationRequest) (topology.Plan, error) {
	p, err := store.LoadPlan(ctx, id)
	if err == nil || !errors.Is(err, topology.ErrNoPlan) {
		return p, err
	}
	from, err := store.Load(ctx, fromVersion)
	if err != nil {
		return p, fmt.Errorf("load topology v%d: %w", fromVersion, err)
	}
	reg, err := plan.Registry(ctx, store)
	if err != nil {
		return p, err
	}
	c, err := req.Change()
	if err != nil {
		return p, badInput("%v", err)
	}
	computed, err := plan.Compute(from, reg, plan.Request{Migration: id, Change: c})
	if err != nil {
		return p, planErr(err)
	}
	p = computed.Stored()
	return p, store.SavePlan(ctx, p)
}

// tableEstimates sums a move's estimates by table, in the order met.
func tableEstimates(es []tableset.Estimate) []workflows.TableEstimate {
	var out []workflows.TableEstimate
	idx := map[string]int{}
	for _, e := range es {
		i, ok := idx[e.Table]
		if !ok {
			i = len(out)
			idx[e.Table] = i
			out = append(out, workflows.TableEstimate{Table: e.Table})
		}
		out[i].Rows += e.Rows
		out[i].Bytes += e.Bytes
	}
	return out
}

// store is the topology store of keyspace ks ("" the default one).
func (a *Activities) store(ctx context.Context, ks string) (*topology.Store, error) {
	pool, err := a.pools.control(ctx)
	if err != nil {
		return nil, err
	}
	// Once per process: concurrent activities need not race on DDL.
	a.controlMu.Lock()
	defer a.controlMu.Unlock()
	if !a.controlReady {
		if err := topology.Migrate(ctx, pool); err != nil {
			return nil, fmt.Errorf("prepare the control database: %w", err)
		}
		a.controlReady = true
	}
	return topology.NewStore(pool).In(ks), nil
}

// keyspaceOf is the keyspace of a move's migration.
func keyspaceOf(req *workflows.MigrationRequest) string {
	if req == nil {
		return ""
	}
	return req.Keyspace
}

// fences reads the control database for fence.Reconcile, for keyspace ks.
func (a *Activities) fences(ctx context.Context, ks string) (fence.Control, error) {
	store, err := a.store(ctx, ks)
	if err != nil {
		return fence.Control{}, err
	}
	pool, err := a.pools.control(ctx)
	if err != nil {
		return fence.Control{}, err
	}
	return fence.Control{Pool: pool, Store: store}, nil
}

// PublishMigrating publishes topology FromVersion+1: the same owners, the
// moving ranges marked migrating(from→to), new targets registered; every
// registered shard's state follows the new version (topology.StateIn:
// targets joining, a removed shard leaving). Idempotent: a retry after the
// publish finds the version it made.
func (a *Activities) PublishMigrating(ctx context.Context, in workflows.PublishInput) (int64, error) {
	v, err := a.publishMigrating(ctx, in)
	return v, classify(err)
}

func (a *Activities) publishMigrating(ctx context.Context, in workflows.PublishInput) (int64, error) {
	store, err := a.store(ctx, in.Request.Keyspace)
	if err != nil {
		return 0, err
	}
	plan, err := storedPlan(ctx, store, in.Request.ID, in.FromVersion, in.Request)
	if err != nil {
		return 0, err
	}
	moves := make([]topology.MoveRanges, len(in.Moves))
	for i, mv := range in.Moves {
		moves[i] = topology.MoveRanges{Source: mv.Source, Target: mv.Target, Ranges: mv.Ranges}
	}
	v, err := topology.StartMigration(ctx, store, in.Request.ID, string(in.Request.Kind), in.FromVersion, plan.Before, plan.After, moves,
		func(ctx context.Context) error { return a.registerTargets(ctx, store, in) })
	if err != nil {
		return 0, topologyErr(err)
	}
	return v, store.SyncShardStates(ctx)
}

// topologyErr makes the topology's refusals of a migration's start or end
// bad input (no retry changes them); other errors stay retryable.
func topologyErr(err error) error {
	if errors.Is(err, topology.ErrTopologyMoved) || errors.Is(err, topology.ErrNotCutOver) || errors.Is(err, topology.ErrInvalidTopology) {
		return badInput("%v", err)
	}
	return err
}

func (a *Activities) registerTargets(ctx context.Context, store *topology.Store, in workflows.PublishInput) error {
	shards, err := store.Shards(ctx)
	if err != nil {
		return fmt.Errorf("read the shard registry: %w", err)
	}
	registered := map[string]bool{}
	for _, sh := range shards {
		registered[sh.Name] = true
	}
	for _, mv := range in.Moves {
		if registered[mv.Target] {
			continue
		}
		base, ok := a.pools.r.shardDSN(mv.Target)
		if !ok {
			return badInput("shard %q is not in the worker configuration", mv.Target)
		}
		ref, err := topology.ParseConnRef(base)
		if err != nil {
			return badInput("the DSN configured for shard %s does not parse", mv.Target)
		}
		if err := store.RegisterShard(ctx, topology.Shard{Name: mv.Target, Conn: ref, State: topology.ShardJoining}); err != nil {
			return fmt.Errorf("register shard %s: %w", mv.Target, err)
		}
		registered[mv.Target] = true
	}
	return nil
}

// PublishStable ends a migration in the topology: no range migrating, the
// planned ring when every move completed (the current ring, with the rolled
// back moves' ranges still on their old owners, otherwise), and shard states
// as that version says (topology.StateIn). Idempotent.
func (a *Activities) PublishStable(ctx context.Context, in workflows.PublishInput) (int64, error) {
	v, err := a.publishStable(ctx, in)
	return v, classify(err)
}

func (a *Activities) publishStable(ctx context.Context, in workflows.PublishInput) (int64, error) {
	store, err := a.store(ctx, in.Request.Keyspace)
	if err != nil {
		return 0, err
	}
	var ( // with moves rolled back: the ring as it stands, the old weights
		after   *ring.Ring
		weights map[string]float64
	)
	if len(in.RolledBack) == 0 {
		plan, err := storedPlan(ctx, store, in.Request.ID, in.FromVersion, in.Request)
		if err != nil {
			return 0, err
		}
		after, weights = plan.After, plan.Weights
	}
	v, err := topology.EndMigration(ctx, store, in.Request.ID, string(in.Request.Kind), after, weights)
	if err != nil {
		return 0, topologyErr(err)
	}
	return v, store.SyncShardStates(ctx)
}
