package cutover

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgddl"
)

// PGJournal keeps the cutover journal of one move in the control database.
type PGJournal struct {
	Pool *pgxpool.Pool
	Move string
}

const journalSQL = `
CREATE SCHEMA IF NOT EXISTS reshard;
CREATE TABLE IF NOT EXISTS reshard.cutover_journal (
	id     bigserial PRIMARY KEY,
	move   text NOT NULL,
	step   text NOT NULL,
	detail text NOT NULL DEFAULT '',
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS cutover_journal_move ON reshard.cutover_journal (move, id);
`

// EnsureJournal creates the journal table; idempotent and safe to run
// concurrently.
func EnsureJournal(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pgddl.Apply(ctx, pool, journalSQL, 0); err != nil {
		return fmt.Errorf("create cutover journal: %w", err)
	}
	return nil
}

func (j PGJournal) Record(ctx context.Context, step Step, detail string) error {
	_, err := j.Pool.Exec(ctx, `INSERT INTO reshard.cutover_journal (move, step, detail) VALUES ($1, $2, $3)`, j.Move, string(step), detail)
	return err
}

func (j PGJournal) Last(ctx context.Context) (Step, error) {
	var s string
	err := j.Pool.QueryRow(ctx, `SELECT step FROM reshard.cutover_journal WHERE move = $1 ORDER BY id DESC LIMIT 1`, j.Move).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return Step(s), err
}

// Entry is one journal line.
type Entry struct {
	Step   Step
	Detail string
}

// History returns the journal of the move, oldest first.
func (j PGJournal) History(ctx context.Context) ([]Entry, error) {
	rows, err := j.Pool.Query(ctx, `SELECT step, detail FROM reshard.cutover_journal WHERE move = $1 ORDER BY id`, j.Move)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var s string
		err := r.Scan(&s, &e.Detail)
		e.Step = Step(s)
		return e, err
	})
}
