package backfill

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Standby says that the copy's source pool is a streaming standby of the
// source shard's primary, which keeps the move's slot: the chunks are read
// there to spare the primary.
//
// A chunk read on a standby sees the primary's history up to the standby's
// replay position, so the copy reads a chunk only on a connection whose
// standby has replayed at least Floor (the slot's consistent point L0): the
// stream replays every change from L0 on, and a chunk read earlier could
// miss a row the stream never brings again (written before L0 on the
// primary, not yet replayed on the standby). Replay only moves forward
// while a connection lasts, so a position read on the connection just
// before the chunk's statement bounds that statement's snapshot from below.
type Standby struct {
	// Name names the standby in messages ("standby of shard1").
	Name string
	// Floor is the slot's consistent point L0.
	Floor pglogrepl.LSN
	// Poll is how often a lagging standby's replay is read again (default
	// 100 ms).
	Poll time.Duration
	// Conflicts is how often one chunk is read again after the standby
	// cancelled it for a recovery conflict before the copy gives up
	// (default 20; then the unit's retries take over).
	Conflicts int
}

// ReplayLag: the standby has not replayed the slot's consistent point yet.
type ReplayLag struct {
	Name            string
	Replayed, Floor pglogrepl.LSN
	PauseState      string // pg_get_wal_replay_pause_state()
	Waited          time.Duration
}

func (e *ReplayLag) Error() string {
	msg := fmt.Sprintf("%s has replayed the source's WAL to %s, behind the move's slot at %s (waited %s): the copy reads a chunk there only once it has replayed past the slot",
		e.Name, e.Replayed, e.Floor, e.Waited.Round(time.Millisecond))
	if e.PauseState != "" && e.PauseState != "not paused" {
		msg += fmt.Sprintf("; its replay is %s: run SELECT pg_wal_replay_resume() on it", e.PauseState)
	}
	return msg
}

// Retryable: the standby catches up by itself.
func (e *ReplayLag) Retryable() bool { return true }

// NotStandbyError: the server given as the standby is not in recovery (a
// primary, or a promoted standby whose history may differ from the
// source's).
type NotStandbyError struct{ Name string }

func (e *NotStandbyError) Error() string {
	return fmt.Sprintf("%s is not in recovery: it is not a streaming standby of the source (promoted, or the wrong address): fix the shard's standby address in reshard.yaml, or copy from the primary (--read-from primary)", e.Name)
}

// awaitReplay waits on conn until its standby has replayed s.Floor, or ctx
// ends (then a *ReplayLag).
func (s *Standby) awaitReplay(ctx context.Context, conn *pgxpool.Conn) error {
	poll := s.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	start := time.Now()
	var last *ReplayLag // the last position read, for a ctx that ends inside a read
	for {
		var (
			recovery bool
			replayed *string
			pause    *string
		)
		if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,
			CASE WHEN pg_is_in_recovery() THEN pg_get_wal_replay_pause_state() END`).Scan(&recovery, &replayed, &pause); err != nil {
			if ctx.Err() != nil && last != nil {
				// The wait ended during a read (CI saw it): the lag as last read.
				last.Waited = time.Since(start)
				return last
			}
			return fmt.Errorf("read the replay position of %s: %w", s.Name, err)
		}
		if !recovery {
			return &NotStandbyError{Name: s.Name}
		}
		var at pglogrepl.LSN
		if replayed != nil {
			var err error
			if at, err = pglogrepl.ParseLSN(*replayed); err != nil {
				return fmt.Errorf("replay position %q of %s: %w", *replayed, s.Name, err)
			}
		}
		if at >= s.Floor {
			return nil
		}
		last = &ReplayLag{Name: s.Name, Replayed: at, Floor: s.Floor, Waited: time.Since(start)}
		if pause != nil {
			last.PauseState = *pause
		}
		t := time.NewTimer(poll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			last.Waited = time.Since(start)
			return last
		}
	}
}

// conflicts is how often a chunk is read again after a recovery conflict.
func (s *Standby) conflicts() int {
	if s.Conflicts <= 0 {
		return 20
	}
	return s.Conflicts
}
