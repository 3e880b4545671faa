package rollback

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Target is what the control database says of a migration to recover: its
// stored plan and the tables of its keyspace (none when no topology version
// names it: it changed nothing).
type Target struct {
	Plan   topology.Plan
	Tables tableset.Spec
}

// FindTarget reads the target of Recover for migration id: the control
// database's schema brought up to date, the stored plan (an error wrapping
// topology.ErrNoPlan when there is none: no such migration), then, once
// ready (the caller's check that no workflow of the migration runs, given
// the plan) said nothing against it, the keyspace's tables.
func FindTarget(ctx context.Context, store *topology.Store, control *pgxpool.Pool, id string, ready func(topology.Plan) error) (Target, error) {
	if err := topology.Migrate(ctx, control); err != nil {
		return Target{}, err
	}
	start, err := store.FindMigration(ctx, id)
	notStarted := errors.Is(err, topology.ErrNotStarted)
	if err != nil && !notStarted {
		return Target{}, err
	}
	plan, err := store.LoadPlan(ctx, id)
	if err != nil {
		return Target{}, err
	}
	if err := ready(plan); err != nil {
		return Target{}, err
	}
	t := Target{Plan: plan}
	if !notStarted {
		ks, err := store.ResolveKeyspace(ctx, start.Keyspace)
		if err != nil {
			return Target{}, fmt.Errorf("migration %s: the tables of keyspace %s: %w", id, start.Keyspace, err)
		}
		t.Tables = ks.Spec()
	}
	return t, nil
}
