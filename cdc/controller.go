package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The Controller side of a stream: what verify and the cutover ask of it
// (positions, hold at an LSN, drain to a marker) and how the runner honours
// a hold.

// Positions implements Controller.
func (s *Stream) Positions() (received, applied, acked pglogrepl.LSN) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received, s.applied, s.acked
}

// LagBytes is the stream's lag as reshard_cdc_lag_bytes shows it: the
// server's WAL end, as its last message told it, less what is applied.
func (s *Stream) LagBytes() int64 { return s.lagBytes.Load() }

// WaitApplied implements Controller.
func (s *Stream) WaitApplied(ctx context.Context, lsn pglogrepl.LSN) error {
	return s.wait(ctx, func() (bool, error) { return s.applied >= lsn, nil })
}

// DrainToMarker implements Controller.
func (s *Stream) DrainToMarker(ctx context.Context, payload string) (pglogrepl.LSN, error) {
	s.mu.Lock()
	s.drains++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.drains--
		s.mu.Unlock()
	}()
	var at pglogrepl.LSN
	err := s.wait(ctx, func() (bool, error) {
		lsn, ok := s.markers[payload]
		at = lsn
		return ok && s.applied >= lsn, nil
	})
	return at, err
}

// HoldAt implements Controller.
func (s *Stream) HoldAt(ctx context.Context, lsn pglogrepl.LSN) error {
	s.mu.Lock()
	s.holdGen++
	gen := s.holdGen
	s.hold, s.holdSet, s.held, s.holdErr = lsn, true, false, nil
	s.notify()
	wake := s.wake
	s.mu.Unlock()
	if wake != nil {
		wake()
	}
	if err := s.emitHoldMarker(ctx, gen); err != nil {
		s.mu.Lock()
		if s.holdGen == gen {
			s.holdSet, s.held = false, false
			s.notify()
		}
		s.mu.Unlock()
		return err
	}
	err := s.wait(ctx, func() (bool, error) {
		if s.holdGen != gen {
			return false, errors.New("hold replaced by a later HoldAt")
		}
		if s.holdErr != nil {
			return false, s.holdErr
		}
		return s.held, nil
	})
	if err != nil && !errors.Is(err, ErrHoldPassed) {
		s.mu.Lock()
		if s.holdGen == gen { // withdraw our request
			s.holdSet, s.held = false, false
			s.notify()
		}
		s.mu.Unlock()
	}
	return err
}

// emitHoldMarker commits a logical message on the source, after the hold's
// LSN, so that the stream receives a commit past the hold even when nothing
// else is written there.
func (s *Stream) emitHoldMarker(ctx context.Context, gen uint64) error {
	cfg, err := s.opts.sourceConfig()
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return wrapOp("connect to the source to emit a hold marker", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	payload := fmt.Sprintf("hold:%s:%d", s.opts.Move, gen)
	if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, MarkerPrefix, payload); err != nil {
		return wrapOp("emit a hold marker on the source", err)
	}
	return nil
}

// Release implements Controller.
func (s *Stream) Release() {
	s.mu.Lock()
	s.holdSet, s.held, s.holdErr = false, false, nil
	s.notify()
	s.mu.Unlock()
}

// holdBefore is called at a Begin: a transaction committing after the hold
// LSN must wait.
func (r *runner) holdBefore(ctx context.Context, commit pglogrepl.LSN) error {
	for {
		r.s.mu.Lock()
		hold, set, held, gen := r.s.hold, r.s.holdSet, r.s.held, r.s.holdGen
		r.s.mu.Unlock()
		if !set || held || commit <= hold {
			return nil
		}
		if r.lastCommit > hold {
			return r.passed(ctx, hold)
		}
		if err := r.commitBatch(ctx); err != nil {
			return err
		}
		if err := r.holdWait(ctx, gen); err != nil {
			return err
		}
		// Released, or a new HoldAt: look again at this transaction.
	}
}

// checkHold, between transactions: the hold is reached once a source
// transaction ending at or past its LSN has been received — transactions
// arrive in commit order, so every one committed up to the hold is then in.
// A keepalive's WAL end is not taken as that proof: under live writes it was
// seen ahead of commits not yet received (verify found the target behind the
// source snapshot), so HoldAt emits a marker on the source to guarantee a
// later commit arrives even when the application is idle.
func (r *runner) checkHold(ctx context.Context) error {
	if r.inTxn {
		return nil
	}
	r.s.mu.Lock()
	hold, set, held, gen := r.s.hold, r.s.holdSet, r.s.held, r.s.holdGen
	r.s.mu.Unlock()
	if !set || held {
		return nil
	}
	if r.lastCommit > hold {
		return r.passed(ctx, hold)
	}
	if r.lastEnd < hold {
		return nil
	}
	if err := r.commitBatch(ctx); err != nil {
		return err
	}
	return r.holdWait(ctx, gen)
}

// passed: a transaction committing after the hold LSN was already received.
// If it is not committed on the target, roll back and re-read; otherwise
// hold here (a gate) and tell the caller.
func (r *runner) passed(ctx context.Context, hold pglogrepl.LSN) error {
	if r.committedCommit <= hold {
		r.rewind = true
		return nil
	}
	if err := r.commitBatch(ctx); err != nil {
		return err
	}
	r.s.mu.Lock()
	r.s.holdErr = fmt.Errorf("hold at %s: the target already holds a source transaction committed at %s: %w", hold, r.committedCommit, ErrHoldPassed)
	gen := r.s.holdGen
	r.s.mu.Unlock()
	return r.holdWait(ctx, gen)
}

// holdWait holds the applier until Release or a new HoldAt, still
// acknowledging to the source so that wal_sender_timeout does not fire.
func (r *runner) holdWait(ctx context.Context, gen uint64) error {
	r.s.mu.Lock()
	if r.s.holdGen != gen || !r.s.holdSet {
		r.s.mu.Unlock()
		return nil
	}
	r.s.held = r.s.holdErr == nil
	hold := r.s.hold
	r.s.notify()
	r.s.mu.Unlock()
	r.s.log.Info("cdc holding", "lsn", hold.String())
	if err := r.sendStatus(ctx, false); err != nil {
		return err
	}
	for {
		r.s.mu.Lock()
		still := r.s.holdSet && r.s.holdGen == gen
		ch := r.s.changed
		r.s.mu.Unlock()
		if !still {
			r.s.log.Info("cdc released", "lsn", hold.String())
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-time.After(time.Until(r.nextStatus)):
			if err := r.sourceAlive(ctx); err != nil {
				return err
			}
			if err := r.sendStatus(ctx, false); err != nil {
				return err
			}
		}
	}
}

// sourceAlive asks the source's plain session whether the server still runs.
// A held applier reads nothing from its walsender, and a walsender that is
// shutting down waits for its client to confirm the shutdown checkpoint,
// while our status updates keep wal_sender_timeout from firing: a fast
// shutdown of the source (a planned switchover) waited as long as the hold
// (TestSwitchoverDoesNotWaitForStream/held: more than 60 s). The shutdown
// ends plain sessions first (57P01), so this ends the stream, and with it the
// walsender, within a status interval; the supervisor restarts the stream.
func (r *runner) sourceAlive(ctx context.Context) error {
	src, err := r.sourceConn(ctx)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, r.o.StatusInterval)
	defer cancel()
	if err := src.Ping(pctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		src.Close(context.Background())
		return &ConnError{Op: "hold: check the source", Err: err}
	}
	return nil
}
