package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
)

// MoveOutcome is how a move ended.
type MoveOutcome string

const (
	// MoveCleanedUp: the ranges are stable on the new owner and the moved
	// rows are deleted from the old owner.
	MoveCleanedUp MoveOutcome = "cleaned_up"
	// MoveRolledBack: the ranges are back on (or never left) the old owner
	// and the copy is deleted from the target.
	MoveRolledBack MoveOutcome = "rolled_back"
)

// MoveEnd is the end of one move: the ranges of a migration going from one
// shard to another.
type MoveEnd struct {
	MigrationID string
	MoveID      string
	From, To    string
	Ranges      []ring.Range
	Outcome     MoveOutcome
}

// RecordMoveEnd records that a move has ended, after its last step (the
// deletion of the rows the move left behind). The topology cannot say it:
// cleanup publishes the ranges stable on the new owner before it deletes
// the old owner's rows. reshard.moves and reshard.current_ranges (settled)
// read it (docs/contract.md). Recording the same end again is a no-op.
func (s *Store) RecordMoveEnd(ctx context.Context, e MoveEnd) error {
	if e.MigrationID == "" || e.From == "" || e.To == "" {
		return fmt.Errorf("record the end of move %s: the migration and both shards are required", e.MoveID)
	}
	if e.Outcome != MoveCleanedUp && e.Outcome != MoveRolledBack {
		return fmt.Errorf("record the end of move %s: outcome %q (want %s or %s)", e.MoveID, e.Outcome, MoveCleanedUp, MoveRolledBack)
	}
	rs, err := json.Marshal(ring.Normalize(e.Ranges))
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO reshard.move_ends (keyspace, migration_id, from_shard, to_shard, move_id, ranges, outcome)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (migration_id, from_shard, to_shard) DO NOTHING`,
		s.keyspace, e.MigrationID, e.From, e.To, e.MoveID, rs, string(e.Outcome)); err != nil {
		return fmt.Errorf("record the end of move %s of migration %s: %w", e.MoveID, e.MigrationID, err)
	}
	return nil
}

// RunningMove is a move of a started migration of the store's keyspace that
// has not ended: both of its shards may hold rows of its ranges.
type RunningMove struct {
	MigrationID string
	From, To    string
	Ranges      []ring.Range
}

// RunningMoves lists the moves of the keyspace that have not ended
// (reshard.moves, state running).
func (s *Store) RunningMoves(ctx context.Context) ([]RunningMove, error) {
	rows, err := s.pool.Query(ctx, `SELECT migration_id, from_shard, to_shard, ranges FROM reshard.moves
WHERE keyspace = $1 AND state = 'running' ORDER BY migration_id, from_shard, to_shard`, s.keyspace)
	if err != nil {
		return nil, fmt.Errorf("read the running moves of keyspace %s: %w", s.keyspace, err)
	}
	defer rows.Close()
	var out []RunningMove
	for rows.Next() {
		var m RunningMove
		var rs []byte
		if err := rows.Scan(&m.MigrationID, &m.From, &m.To, &rs); err != nil {
			return nil, fmt.Errorf("read the running moves of keyspace %s: %w", s.keyspace, err)
		}
		if err := json.Unmarshal(rs, &m.Ranges); err != nil {
			return nil, fmt.Errorf("running move %s→%s of migration %s: ranges: %w", m.From, m.To, m.MigrationID, err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the running moves of keyspace %s: %w", s.keyspace, err)
	}
	return out, nil
}

// MoveEnds are the recorded ends of a migration's moves, by (from, to).
func (s *Store) MoveEnds(ctx context.Context, migrationID string) (map[[2]string]MoveOutcome, error) {
	rows, err := s.pool.Query(ctx, `SELECT from_shard, to_shard, outcome FROM reshard.move_ends WHERE migration_id = $1`, migrationID)
	if err != nil {
		return nil, fmt.Errorf("read the move ends of migration %s: %w", migrationID, err)
	}
	defer rows.Close()
	out := map[[2]string]MoveOutcome{}
	for rows.Next() {
		var from, to, outcome string
		if err := rows.Scan(&from, &to, &outcome); err != nil {
			return nil, fmt.Errorf("read the move ends of migration %s: %w", migrationID, err)
		}
		out[[2]string{from, to}] = MoveOutcome(outcome)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the move ends of migration %s: %w", migrationID, err)
	}
	return out, nil
}

// MigrationStart is what the control database says of a migration's
// start: the keyspace and kind of the version that started it (the first
// naming it), and whether the version of its end ("migration <id> (<kind>)
// ends", EndMigration) is published.
type MigrationStart struct {
	Keyspace, Kind string
	Version        int64 // the version that started it
	Ended          bool
}

// ErrNotStarted: no topology version names the migration (it was never
// planned, or was stopped before it published anything).
var ErrNotStarted = errors.New("no topology version names the migration")

// FindMigration reads a migration's start in any keyspace (the store's
// keyspace does not matter), or ErrNotStarted.
func (s *Store) FindMigration(ctx context.Context, id string) (MigrationStart, error) {
	var m MigrationStart
	var reason string
	err := s.pool.QueryRow(ctx, `SELECT keyspace, version, reason FROM reshard.topology_versions
WHERE migration_id = $1 ORDER BY keyspace, version LIMIT 1`, id).Scan(&m.Keyspace, &m.Version, &reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("migration %s: %w", id, ErrNotStarted)
	}
	if err != nil {
		return m, fmt.Errorf("read the start of migration %s: %w", id, err)
	}
	// "migration <id> (<kind>): N moves start" (StartMigration).
	if rest, ok := strings.CutPrefix(reason, "migration "+id+" ("); ok {
		if i := strings.Index(rest, ")"); i > 0 {
			m.Kind = rest[:i]
		}
	}
	if m.Kind == "" {
		return m, fmt.Errorf("migration %s: topology v%d of keyspace %s names it, but not as its start (%q)", id, m.Version, m.Keyspace, reason)
	}
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM reshard.topology_versions WHERE keyspace = $1 AND migration_id = $2 AND reason = $3)`,
		m.Keyspace, id, endReason(id, m.Kind)).Scan(&m.Ended); err != nil {
		return m, fmt.Errorf("read the end of migration %s: %w", id, err)
	}
	return m, nil
}
