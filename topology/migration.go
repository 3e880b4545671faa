package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
)

// The two topology changes of a whole migration: its start (every moving
// range marked migrating, still served by its old owner) and its end (no
// range migrating; the planned ring, or the ring as it stands when moves
// were rolled back). Each move's own changes in between are Handovers.

// MoveRanges is one move of a migration: ranges going from Source to
// Target.
type MoveRanges struct {
	Source, Target string
	Ranges         []ring.Range
}

// ErrTopologyMoved: the topology is not the version a migration was planned
// on (another publisher came first); plan it again.
var ErrTopologyMoved = errors.New("the topology moved since the migration was planned")

// ErrNotCutOver: the planned ring of a migration's end says something the
// cutovers did not make true.
var ErrNotCutOver = errors.New("a move did not cut over")

// ErrInvalidTopology: the topology a migration's start or end would publish
// is not a valid one (topology.New refused it).
var ErrInvalidTopology = errors.New("invalid topology")

// StartMigration publishes version fromVersion+1: the owners of fromVersion
// (the overlay of before and after, so every vnode of after exists), the
// moves' ranges migrating from their source to their target, tagged with
// the migration's id. Idempotent: a retry finds the version an earlier
// attempt published and returns it. prepare, when not nil, runs once the
// version is checked and before the publish (registering the targets).
func StartMigration(ctx context.Context, s *Store, id, kind string, fromVersion int64, before, after *ring.Ring, moves []MoveRanges, prepare func(context.Context) error) (int64, error) {
	cur, err := s.Current(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the current topology: %w", err)
	}
	if cur.MigrationID == id && cur.Version > fromVersion {
		return cur.Version, nil // published by an earlier attempt
	}
	if cur.Version != fromVersion {
		return 0, fmt.Errorf("%w: v%d (planned) is now v%d (%s): plan the migration again", ErrTopologyMoved, fromVersion, cur.Version, cur.Reason)
	}
	if prepare != nil {
		if err := prepare(ctx); err != nil {
			return 0, err
		}
	}
	r, err := ring.Overlay(before, after, nil)
	if err != nil {
		return 0, fmt.Errorf("overlay ring: %w", err)
	}
	var mig []RangeState
	for _, mv := range moves {
		for _, rg := range mv.Ranges {
			mig = append(mig, RangeState{Range: rg, Owner: mv.Source, Status: Migrating, From: mv.Source, To: mv.Target})
		}
	}
	next, err := New(r, mig, fmt.Sprintf("migration %s (%s): %d moves start", id, kind, len(moves)))
	if err != nil {
		return 0, fmt.Errorf("migrating topology: %w: %w", ErrInvalidTopology, err)
	}
	pub, err := s.Publish(ctx, cur.Version, next.WithMigrationID(id))
	if err != nil {
		return 0, fmt.Errorf("publish migrating topology: %w", err)
	}
	return pub.Version, nil
}

// EndMigration publishes the end of a migration: no range migrating, the
// planned ring after when every move completed (it must agree with what
// the cutovers published: ErrNotCutOver otherwise), the current ring when
// after is nil (moves rolled back keep their ranges on the old owners).
// With the planned ring it writes the plan's weights (Plan.Weights) to the
// shard registry in the same transaction as the publish, so the registry's
// weights are always those of the last planned ring published: a
// migration rolled back (after nil) leaves the weights it would have set
// unwritten, and the registry keeps the old ones. Idempotent, and retried
// over concurrent publishers.
func EndMigration(ctx context.Context, s *Store, id, kind string, after *ring.Ring, weights map[string]float64) (int64, error) {
	if after != nil && len(weights) > 0 {
		if err := checkWeights(weights, after); err != nil {
			return 0, fmt.Errorf("end migration %s: %w: %w", id, ErrInvalidTopology, err)
		}
	} else {
		weights = nil
	}
	reason := endReason(id, kind)
	for {
		cur, err := s.Current(ctx)
		if err != nil {
			return 0, fmt.Errorf("read the current topology: %w", err)
		}
		if cur.MigrationID == id && cur.Reason == reason {
			return cur.Version, nil
		}
		r := cur.Ring
		if after != nil {
			for _, v := range cur.Ring.VNodes() {
				if after.Owner(v.Token) != v.Shard {
					return 0, fmt.Errorf("%w: topology v%d gives token %d to %s but the planned ring gives it to %s; not publishing the planned ring",
						ErrNotCutOver, cur.Version, v.Token, v.Shard, after.Owner(v.Token))
				}
			}
			r = after
		}
		next, err := New(r, nil, reason)
		if err != nil {
			return 0, fmt.Errorf("stable topology: %w: %w", ErrInvalidTopology, err)
		}
		pub, err := s.PublishGuarded(ctx, cur.Version, next.WithMigrationID(id), setWeights(weights))
		if errors.Is(err, ErrVersionConflict) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("publish stable topology: %w", err)
		}
		return pub.Version, nil
	}
}

// endReason is the reason of the version that ends a migration.
func endReason(id, kind string) string { return fmt.Sprintf("migration %s (%s) ends", id, kind) }

// setWeights writes weights to the shard registry inside a publish's
// transaction (nil: nothing to write).
func setWeights(weights map[string]float64) Guard {
	if len(weights) == 0 {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx) error {
		names := make([]string, 0, len(weights))
		for name := range weights {
			names = append(names, name)
		}
		slices.Sort(names) // one lock order
		for _, name := range names {
			tag, err := tx.Exec(ctx, `UPDATE reshard.shards SET weight = $2, updated_at = now() WHERE name = $1 AND weight IS DISTINCT FROM $2`, name, weights[name])
			if err != nil {
				return fmt.Errorf("set the weight of shard %s to %g: %w", name, weights[name], err)
			}
			if tag.RowsAffected() == 0 {
				var registered bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM reshard.shards WHERE name = $1)`, name).Scan(&registered); err != nil {
					return err
				}
				if !registered {
					return fmt.Errorf("set the weight of shard %s: it is not registered", name)
				}
			}
		}
		return nil
	}
}
