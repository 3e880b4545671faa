package topology

import (
	"context"
	"fmt"
)

// ClusterID is the id of the cluster whose control database this is: made
// once, at random, by the control database's schema (step 13). A migration
// request carries it (workflows.MigrationRequest.Cluster) so that a worker
// whose control database is another cluster's refuses its activities. It
// names no server and holds no secret.
func (s *Store) ClusterID(ctx context.Context) (string, error) {
	var id string
	if err := s.pool.QueryRow(ctx, `SELECT id FROM reshard.cluster`).Scan(&id); err != nil {
		return "", fmt.Errorf("read the cluster id of the control database: %w", err)
	}
	return id, nil
}

// HasPlan reports whether the control database holds the stored plan of
// migration id, whatever its keyspace.
func (s *Store) HasPlan(ctx context.Context, id string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM reshard.plans WHERE migration_id = $1)`, id).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for the plan of migration %s: %w", id, err)
	}
	return ok, nil
}

// EnsureClusterID is the cluster's id, made first by the schema's next
// step on a control database from before cluster ids (as a worker's first
// activity would).
func (s *Store) EnsureClusterID(ctx context.Context) (string, error) {
	if id, err := s.ClusterID(ctx); err == nil {
		return id, nil
	}
	if err := s.Migrate(ctx); err != nil {
		return "", err
	}
	return s.ClusterID(ctx)
}
