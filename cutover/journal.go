package cutover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/topology"
)

// PGJournal keeps the cutover journal of one move in the control database.
//
// Attempts: every attempt at a move's cutover (and every rollback or
// cleanup of the move) first Claims the move, which makes it the newest
// attempt (Epoch). From then on, an older attempt that wakes up — Temporal
// retried its activity elsewhere while it was cut off — changes nothing:
// its journal records fail with ErrStale (the journal is written before
// every step that acts), its topology publish is refused by Guard in the
// publish's own transaction, and its fence hold can neither replace nor
// release a newer one (fence.Control.Hold and Release compare epochs).
type PGJournal struct {
	Pool *pgxpool.Pool
	Move string
	// Epoch is this attempt's, from Claim; 0 records without checking (a
	// reader, or code from before attempts were numbered).
	Epoch int64
}

// ErrStale: a newer attempt has claimed the move; this one must stop
// without acting.
var ErrStale = errors.New("a newer attempt has taken over this move; this attempt stops without acting")

// Claim makes a new attempt at the move, newer than every earlier one, and
// returns the journal of it.
func (j PGJournal) Claim(ctx context.Context) (PGJournal, error) {
	err := j.Pool.QueryRow(ctx, `INSERT INTO reshard.cutover_epoch (move, epoch) VALUES ($1, 1)
ON CONFLICT (move) DO UPDATE SET epoch = cutover_epoch.epoch + 1 RETURNING epoch`, j.Move).Scan(&j.Epoch)
	if err != nil {
		return j, fmt.Errorf("claim move %s: %w", j.Move, err)
	}
	return j, nil
}

// flushedLater are the steps recorded inside the write pause whose record
// need not wait for its WAL flush: the next durable commit in the control
// database flushes it too (WAL is flushed in order), and that commit comes
// before anything relies on the record. The publish record is followed by
// the publish (committed durably: it is the point of no return); the
// unfence-target record by the hold's release and the done record. Lost
// with the control database before that commit, they are not needed:
// Resume asks the topology whether the move was published, whatever the
// journal's last step past fence-source.
var flushedLater = map[Step]bool{StepPublish: true, StepUnfenceTarget: true}

// Record journals a step, only while this attempt is the newest (ErrStale
// otherwise).
func (j PGJournal) Record(ctx context.Context, step Step, detail string) error {
	sync := "on"
	if flushedLater[step] {
		sync = "off"
	}
	// set_config(..., true) in the statement sets synchronous_commit for
	// its own transaction, read at its commit: one round trip.
	tag, err := j.Pool.Exec(ctx, `INSERT INTO reshard.cutover_journal (move, step, detail, epoch)
SELECT $1, $2, $3, $4::bigint FROM (SELECT set_config('synchronous_commit', $5, true)) c
WHERE $4::bigint = 0 OR $4::bigint = (SELECT epoch FROM reshard.cutover_epoch WHERE move = $1)`, j.Move, string(step), detail, j.Epoch, sync)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("journal %s of move %s (attempt %d): %w", step, j.Move, j.Epoch, ErrStale)
	}
	return nil
}

// Guard refuses a topology publish unless this attempt is the move's
// newest, checked in the publish's transaction; the row lock makes a Claim
// wait for the publish to commit, so no newer attempt decides the move is
// unpublished while this one publishes it.
func (j PGJournal) Guard() topology.Guard {
	if j.Epoch == 0 {
		return nil
	}
	return func(ctx context.Context, tx pgx.Tx) error {
		var cur int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM reshard.cutover_epoch WHERE move = $1 FOR SHARE`, j.Move).Scan(&cur); err != nil {
			return fmt.Errorf("check attempt %d of move %s: %w", j.Epoch, j.Move, err)
		}
		if cur != j.Epoch {
			return fmt.Errorf("publish of move %s by attempt %d (the newest is %d): %w", j.Move, j.Epoch, cur, ErrStale)
		}
		return nil
	}
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
	At     time.Time // when it was recorded (the control database's clock)
}

// History returns the journal of the move, oldest first.
func (j PGJournal) History(ctx context.Context) ([]Entry, error) {
	rows, err := j.Pool.Query(ctx, `SELECT step, detail, at FROM reshard.cutover_journal WHERE move = $1 ORDER BY id`, j.Move)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var s string
		err := r.Scan(&s, &e.Detail, &e.At)
		e.Step = Step(s)
		return e, err
	})
}

// Pauses reads the move's write pauses from its journal (Pauses of History).
func (j PGJournal) Pauses(ctx context.Context) (PauseSummary, error) {
	h, err := j.History(ctx)
	if err != nil {
		return PauseSummary{}, fmt.Errorf("read the cutover journal of move %s: %w", j.Move, err)
	}
	var now time.Time
	if err := j.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return PauseSummary{}, fmt.Errorf("read the control database's clock: %w", err)
	}
	return Pauses(h, now), nil
}

// OpenPause is the longest write pause open right now over every move of
// the control database: the time since the last fence-source record of each
// move whose journal ends neither in done nor in abort (a cutover in its
// write pause, or one that crashed there and is not settled yet). Zero when
// none is open or no cutover ever ran.
func OpenPause(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	var d time.Duration
	err := pool.QueryRow(ctx, `
SELECT coalesce(max(clock_timestamp() - f.at), interval '0')
FROM (SELECT DISTINCT ON (move) move, step FROM reshard.cutover_journal ORDER BY move, id DESC) last
CROSS JOIN LATERAL (SELECT at FROM reshard.cutover_journal j
	WHERE j.move = last.move AND j.step = $1 ORDER BY id DESC LIMIT 1) f
WHERE last.step NOT IN ($2, $3)`, string(StepFenceSource), string(StepDone), string(StepAbort)).Scan(&d)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeUndefinedTable { // no journal yet
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the open write pauses: %w", err)
	}
	return d, nil
}
