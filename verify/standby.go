package verify

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A verify from a standby (Options.Primary set, the source pool a
// streaming standby of it) reads the source's side there, at one position
// of the primary's history as well:
//
//  1. P, the primary's WAL position when the snapshot is asked for: every
//     transaction the applier can have committed lies before it;
//  2. the standby waits until it has replayed P, pauses its replay and
//     reads where it stopped, R ≥ P; a hot standby sees exactly the
//     transactions whose commit record it has replayed, those whose commit
//     record starts before R;
//  3. the source snapshot is exported there, imported by every session,
//     and replay resumes (it was paused for a few milliseconds);
//  4. the applier is held at R−1 (commit LSN ≤ R−1: the same
//     transactions), and the target's snapshot taken, as with a slot.
//
// An applier already past R−1 (ErrHoldPassed) waits at a gate; the next
// attempt's P is past the gate. Pausing replay needs EXECUTE on
// pg_wal_replay_pause() and pg_wal_replay_resume() (superuser by default;
// docs/operations.md).

// replayPoll is how often a lagging or pausing standby is read again.
const replayPoll = 20 * time.Millisecond

// standbySnapshot opens n transactions on the standby in one snapshot at
// a replay position R at or after the primary's current WAL position, and
// returns them with R.
func standbySnapshot(ctx context.Context, standby, primary *pgxpool.Pool, n int) (_ []*readTx, _ pglogrepl.LSN, err error) {
	var want string
	if err := primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&want); err != nil {
		return nil, 0, fmt.Errorf("read the primary's WAL position: %w", err)
	}
	ctl, err := dial(ctx, standby, "reshard verify")
	if err != nil {
		return nil, 0, fmt.Errorf("connect to the standby: %w", err)
	}
	defer ctl.Close(context.WithoutCancel(ctx))
	if err := awaitReplay(ctx, ctl, want); err != nil {
		return nil, 0, err
	}
	if _, err := ctl.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		return nil, 0, fmt.Errorf("pause the standby's replay (the role needs EXECUTE on pg_wal_replay_pause and pg_wal_replay_resume): %w", err)
	}
	defer func() {
		if _, rerr := ctl.Exec(context.WithoutCancel(ctx), `SELECT pg_wal_replay_resume()`); rerr != nil && err == nil {
			err = fmt.Errorf("resume the standby's replay: %w: run SELECT pg_wal_replay_resume() on it", rerr)
		}
	}()
	for {
		var state string
		if err := ctl.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state); err != nil {
			return nil, 0, fmt.Errorf("read the standby's replay state: %w", err)
		}
		if state == "paused" {
			break
		}
		if err := sleep(ctx, replayPoll); err != nil {
			return nil, 0, err
		}
	}
	var at string
	if err := ctl.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn()::text`).Scan(&at); err != nil {
		return nil, 0, fmt.Errorf("read the standby's replay position: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(at)
	if err != nil {
		return nil, 0, fmt.Errorf("standby replay position %q: %w", at, err)
	}
	first, snap, err := export(ctx, standby)
	if err != nil {
		return nil, 0, err
	}
	rest, err := importN(ctx, standby, snap, n-1)
	if err != nil {
		first.close()
		return nil, 0, err
	}
	return append([]*readTx{first}, rest...), lsn, nil
}

// awaitReplay waits until the standby on conn has replayed want.
func awaitReplay(ctx context.Context, conn *pgx.Conn, want string) error {
	start := time.Now()
	for {
		var (
			recovery bool
			ok       *bool
			at       *string
		)
		if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() >= $1::pg_lsn, pg_last_wal_replay_lsn()::text`, want).Scan(&recovery, &ok, &at); err != nil {
			return fmt.Errorf("read the standby's replay position: %w", err)
		}
		if !recovery {
			return fmt.Errorf("the source's standby is not in recovery (promoted, or not a standby): fix its address in reshard.yaml, or verify from the primary (--read-from primary)")
		}
		if ok != nil && *ok {
			return nil
		}
		if err := sleep(ctx, replayPoll); err != nil {
			got := "nothing"
			if at != nil {
				got = *at
			}
			return fmt.Errorf("the source's standby replayed %s, not yet the primary's %s, in %s: %w", got, want, time.Since(start).Round(time.Millisecond), err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
