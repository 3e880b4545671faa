package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgddl"
	"github.com/reshard/reshard/internal/pgerr"
)

const schemaDDL = `
CREATE SCHEMA IF NOT EXISTS reshard;
CREATE TABLE IF NOT EXISTS reshard.copy_checkpoint (
	move       text    NOT NULL,
	table_name text    NOT NULL,
	range_lo   bigint  NOT NULL, -- exclusive, like ring.Range
	range_hi   bigint  NOT NULL, -- inclusive
	order_by   text    NOT NULL, -- pk | token: how the unit pages
	last_token bigint,           -- token of the last copied row (order_by = token)
	last_pk    text[],           -- primary key of the last copied row, as text
	rows       bigint  NOT NULL DEFAULT 0,
	chunks     bigint  NOT NULL DEFAULT 0,
	done       boolean NOT NULL DEFAULT false,
	started_at timestamptz NOT NULL DEFAULT now(),
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (move, table_name, range_lo, range_hi)
);
-- A copy beside its stream (Options.StreamDuringCopy, cdc's copy gate):
-- the end of the furthest chunk whose read started, recorded before its
-- snapshot is taken; reading_all: a chunk that runs to the table's end.
-- (Checked first: ALTER TABLE locks the table even when it changes nothing.)
DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'reshard.copy_checkpoint'::regclass AND attname = 'reading_all' AND NOT attisdropped) THEN
		ALTER TABLE reshard.copy_checkpoint ADD COLUMN IF NOT EXISTS reading_pk text[],
			ADD COLUMN IF NOT EXISTS reading_all boolean NOT NULL DEFAULT false;
	END IF;
END $$`

// EnsureSchema creates the checkpoint table on the target; idempotent and
// safe to run concurrently.
func EnsureSchema(ctx context.Context, target *pgxpool.Pool) error {
	if err := pgddl.Apply(ctx, target, schemaDDL, 0); err != nil {
		return fmt.Errorf("backfill: create reshard.copy_checkpoint on the target: %w", err)
	}
	return nil
}

// Checkpoint is the committed position of one unit (table × range) of a move.
type Checkpoint struct {
	Move      string
	Table     string
	RangeLo   int64
	RangeHi   int64
	Order     string
	LastToken int64
	LastPK    []string
	Rows      int64
	Chunks    int64
	Done      bool
	StartedAt time.Time
	UpdatedAt time.Time
}

const checkpointCols = `move, table_name, range_lo, range_hi, order_by, coalesce(last_token, 0), last_pk, rows, chunks, done, started_at, updated_at`

func scanCheckpoint(row pgx.Row) (Checkpoint, error) {
	var c Checkpoint
	err := row.Scan(&c.Move, &c.Table, &c.RangeLo, &c.RangeHi, &c.Order, &c.LastToken, &c.LastPK, &c.Rows, &c.Chunks, &c.Done, &c.StartedAt, &c.UpdatedAt)
	return c, err
}

// Checkpoints lists the checkpoints of a move on the target.
func Checkpoints(ctx context.Context, target *pgxpool.Pool, move string) ([]Checkpoint, error) {
	rows, err := target.Query(ctx, `SELECT `+checkpointCols+` FROM reshard.copy_checkpoint WHERE move = $1 ORDER BY table_name, range_lo`, move)
	if err != nil {
		return nil, fmt.Errorf("read checkpoints of move %s: %w", move, err)
	}
	cps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) { return scanCheckpoint(r) })
	if err != nil {
		return nil, fmt.Errorf("read checkpoints of move %s: %w", move, err)
	}
	return cps, nil
}

// DropCheckpoints forgets a move's checkpoints (after cleanup or rollback).
func DropCheckpoints(ctx context.Context, target *pgxpool.Pool, move string) error {
	if _, err := target.Exec(ctx, `DELETE FROM reshard.copy_checkpoint WHERE move = $1`, move); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeUndefinedTable { // never copied anything
			return nil
		}
		return fmt.Errorf("drop checkpoints of move %s: %w", move, err)
	}
	return nil
}

func loadCheckpoint(ctx context.Context, target *pgxpool.Pool, move string, u unit) (Checkpoint, error) {
	c, err := scanCheckpoint(target.QueryRow(ctx, `SELECT `+checkpointCols+` FROM reshard.copy_checkpoint
		WHERE move = $1 AND table_name = $2 AND range_lo = $3 AND range_hi = $4`, move, u.table.String(), u.rng.Lo, u.rng.Hi))
	if errors.Is(err, pgx.ErrNoRows) {
		return Checkpoint{}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("copy %s of %s: read checkpoint: %w", u.rng, u.table, err)
	}
	return c, nil
}

// errCheckpointMoved: the unit's checkpoint is not where the chunk was
// read from. An earlier run's commit that its client gave up on can still
// land after a new run read the checkpoint; the chunk's transaction is
// rolled back and the unit resumes from the checkpoint as it now is, so no
// chunk is counted, or applied on top of a newer position, twice.
var errCheckpointMoved error = checkpointMovedError{}

type checkpointMovedError struct{}

func (checkpointMovedError) Error() string {
	return "the unit's checkpoint moved since this chunk was read (another run committed it)"
}

// Retryable: the unit resumes from the checkpoint as it now is.
func (checkpointMovedError) Retryable() bool { return true }

// saveCheckpoint records, in the chunk's own transaction, that the unit has
// copied rows more rows from from up to pos; it fails with
// errCheckpointMoved unless the recorded position is still from.
func saveCheckpoint(ctx context.Context, tx pgx.Tx, move string, u unit, order Order, from, pos position, rows int, done bool) error {
	token := func(p position) *int64 {
		if order == OrderToken && p.pk != nil {
			return &p.token
		}
		return nil
	}
	chunks := 0
	if rows > 0 {
		chunks = 1
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO reshard.copy_checkpoint AS c (move, table_name, range_lo, range_hi, order_by, last_token, last_pk, rows, chunks, done)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (move, table_name, range_lo, range_hi) DO UPDATE SET
			last_token = EXCLUDED.last_token, last_pk = EXCLUDED.last_pk,
			rows = c.rows + EXCLUDED.rows, chunks = c.chunks + EXCLUDED.chunks,
			done = EXCLUDED.done, updated_at = now()
		WHERE c.last_pk IS NOT DISTINCT FROM $11 AND c.last_token IS NOT DISTINCT FROM $12 AND NOT c.done`,
		move, u.table.String(), u.rng.Lo, u.rng.Hi, string(order), token(pos), pos.pk, rows, chunks, done, from.pk, token(from))
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return errCheckpointMoved
	}
	return nil
}
