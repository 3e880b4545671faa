package topology

import "context"

// Ping checks that the control database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Migrate brings the store's control database to the current schema
// (Migrate of its pool).
func (s *Store) Migrate(ctx context.Context) error { return Migrate(ctx, s.pool) }

// MigratingRanges counts the ranges marked migrating in the current
// topology of every keyspace (the default one included: a cluster set up
// before keyspaces were registered); a keyspace without a topology yet
// counts none.
func (s *Store) MigratingRanges(ctx context.Context) (int, error) {
	kss, err := s.Keyspaces(ctx)
	if err != nil {
		return 0, err
	}
	names := []string{DefaultKeyspace}
	for _, ks := range kss {
		if ks.Name != DefaultKeyspace {
			names = append(names, ks.Name)
		}
	}
	n := 0
	for _, name := range names {
		t, err := s.In(name).Current(ctx)
		if err != nil {
			continue // a keyspace registered before its first topology
		}
		n += len(t.Migrating())
	}
	return n, nil
}
