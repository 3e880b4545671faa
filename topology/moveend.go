package topology

import (
	"context"
	"encoding/json"
	"fmt"

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
