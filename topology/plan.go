package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
)

// Plan is a migration's plan, computed once (ring.PlanChange) and stored in
// the control database when the migration starts; every step after reads
// it instead of planning again.
type Plan struct {
	MigrationID string      `json:"migration_id"`
	FromVersion int64       `json:"from_version"`
	Before      *ring.Ring  `json:"ring_before"`
	After       *ring.Ring  `json:"ring_after"`
	Moves       []ring.Move `json:"moves"`
	// Weights are the registry weights the migration sets when its planned
	// ring is published (EndMigration): shards reweighed, or added with a
	// weight. nil: it sets none. After carries them (ring.Spec).
	Weights map[string]float64 `json:"weights,omitempty"`
	// Capacity is the capacity.Report the plan was predicted with (JSON;
	// nil: none stored). SavePlanCapacity stores it.
	Capacity json.RawMessage `json:"capacity,omitempty"`
}

// ErrNoPlan: no plan is stored for the migration.
var ErrNoPlan = errors.New("no plan stored for the migration")

// SavePlan stores p. Saving the same plan again is a no-op; a different
// plan for the same migration is refused (a plan is never replaced).
func (s *Store) SavePlan(ctx context.Context, p Plan) error {
	if p.MigrationID == "" || p.Before == nil || p.After == nil {
		return errors.New("save plan: the migration id and both rings are required")
	}
	before, err := json.Marshal(p.Before)
	if err != nil {
		return err
	}
	after, err := json.Marshal(p.After)
	if err != nil {
		return err
	}
	moves, err := json.Marshal(p.Moves)
	if err != nil {
		return err
	}
	var weights []byte // SQL NULL: no weights
	if len(p.Weights) > 0 {
		if err := checkWeights(p.Weights, p.After); err != nil {
			return fmt.Errorf("save the plan of migration %s: %w", p.MigrationID, err)
		}
		if weights, err = json.Marshal(p.Weights); err != nil {
			return err
		}
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO reshard.plans (migration_id, from_version, ring_before, ring_after, moves, weights)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (migration_id) DO NOTHING`, p.MigrationID, p.FromVersion, before, after, moves, weights); err != nil {
		return fmt.Errorf("save the plan of migration %s: %w", p.MigrationID, err)
	}
	var same bool
	if err := s.pool.QueryRow(ctx, `SELECT from_version = $2 AND ring_after = $3::jsonb AND moves = $4::jsonb AND weights IS NOT DISTINCT FROM $5::jsonb
FROM reshard.plans WHERE migration_id = $1`,
		p.MigrationID, p.FromVersion, after, moves, weights).Scan(&same); err != nil {
		return fmt.Errorf("save the plan of migration %s: %w", p.MigrationID, err)
	}
	if !same {
		return fmt.Errorf("save the plan of migration %s: a different plan is stored for it; a migration's plan is never replaced (start a new migration)", p.MigrationID)
	}
	return nil
}

// SavePlanCapacity stores the capacity a stored plan was predicted with
// (JSON). The first prediction stays: a retried PLAN probes again, and what
// status sets against the actual figures is what the migration started with.
func (s *Store) SavePlanCapacity(ctx context.Context, migrationID string, capacity []byte) error {
	if _, err := s.pool.Exec(ctx, `UPDATE reshard.plans SET capacity = $2 WHERE migration_id = $1 AND capacity IS NULL`, migrationID, capacity); err != nil {
		return fmt.Errorf("save the predicted capacity of migration %s: %w", migrationID, err)
	}
	return nil
}

// LoadPlan reads a migration's plan, or ErrNoPlan.
func (s *Store) LoadPlan(ctx context.Context, migrationID string) (Plan, error) {
	p := Plan{MigrationID: migrationID, Before: new(ring.Ring), After: new(ring.Ring)}
	var before, after, moves, weights, capacity []byte
	err := s.pool.QueryRow(ctx, `SELECT from_version, ring_before, ring_after, moves, weights, capacity FROM reshard.plans WHERE migration_id = $1`, migrationID).
		Scan(&p.FromVersion, &before, &after, &moves, &weights, &capacity)
	if errors.Is(err, pgx.ErrNoRows) {
		return Plan{}, fmt.Errorf("migration %s: %w", migrationID, ErrNoPlan)
	}
	if err != nil {
		return Plan{}, fmt.Errorf("load the plan of migration %s: %w", migrationID, err)
	}
	if err := json.Unmarshal(before, p.Before); err != nil {
		return Plan{}, fmt.Errorf("plan of migration %s: ring before: %w", migrationID, err)
	}
	if err := json.Unmarshal(after, p.After); err != nil {
		return Plan{}, fmt.Errorf("plan of migration %s: ring after: %w", migrationID, err)
	}
	if err := json.Unmarshal(moves, &p.Moves); err != nil {
		return Plan{}, fmt.Errorf("plan of migration %s: moves: %w", migrationID, err)
	}
	p.Capacity = capacity
	if weights != nil {
		if err := json.Unmarshal(weights, &p.Weights); err != nil {
			return Plan{}, fmt.Errorf("plan of migration %s: weights: %w", migrationID, err)
		}
		var specs []ring.Shard
		for name, w := range p.Weights {
			specs = append(specs, ring.Shard{Name: name, Weight: w})
		}
		if p.After, err = p.After.WithShards(specs); err != nil {
			return Plan{}, fmt.Errorf("plan of migration %s: weights: %w", migrationID, err)
		}
	}
	return p, nil
}

// checkWeights refuses weights a registry cannot hold or that name a shard
// the planned ring does not have.
func checkWeights(weights map[string]float64, after *ring.Ring) error {
	for name, w := range weights {
		if !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("weight %v of shard %s: want a positive number", w, name)
		}
		if !after.HasShard(name) {
			return fmt.Errorf("weight of shard %s: the planned ring has no such shard (shards: %s)", name, strings.Join(after.Shards(), ","))
		}
	}
	return nil
}

// PlannedMove is one move of a plan: every range going from one shard to
// another, under the id that names its streams, checkpoints and journal.
type PlannedMove struct {
	ID       string
	From, To string
	Ranges   []ring.Range
}

// GroupMoves makes one PlannedMove per (from, to) pair of moves, in the
// order the pairs first appear, with ids MoveID(migration, 1), (…, 2), …:
// the moves a migration's workflow runs, computed again from its stored
// plan by whoever needs them without the workflow.
func GroupMoves(migration string, moves []ring.Move) []PlannedMove {
	var out []PlannedMove
	idx := map[[2]string]int{}
	for _, m := range moves {
		k := [2]string{m.From, m.To}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, PlannedMove{ID: MoveID(migration, i+1), From: m.From, To: m.To})
		}
		out[i].Ranges = append(out[i].Ranges, m.Range)
	}
	return out
}

// PlannedMoves are the plan's moves as its workflow runs them (GroupMoves).
func (p Plan) PlannedMoves() []PlannedMove { return GroupMoves(p.MigrationID, p.Moves) }

var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// MoveID is the id of a migration's n-th move: it names the slot,
// publication and origin of its streams (cdc.NamesFor: lower-case letters,
// digits, underscores, at most 40 with the reverse prefix), its checkpoints
// and its cutover journal.
func MoveID(migration string, n int) string {
	base := notIdent.ReplaceAllString(strings.ToLower(migration), "_")
	suffix := "_m" + strconv.Itoa(n)
	if max := 32 - len(suffix); len(base) > max {
		base = base[:max]
	}
	return base + suffix
}

// MoveIndex maps the id of every move of every stored plan (GroupMoves) to
// its migration: whose stream a slot, publication or origin named after a
// move is.
func (s *Store) MoveIndex(ctx context.Context) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT migration_id, moves FROM reshard.plans`)
	if err != nil {
		return nil, fmt.Errorf("read the stored plans: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id string
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, fmt.Errorf("read the stored plans: %w", err)
		}
		var moves []ring.Move
		if err := json.Unmarshal(raw, &moves); err != nil {
			return nil, fmt.Errorf("plan of migration %s: moves: %w", id, err)
		}
		for _, m := range GroupMoves(id, moves) {
			out[m.ID] = id
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the stored plans: %w", err)
	}
	return out, nil
}
