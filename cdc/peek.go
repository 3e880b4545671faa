package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Catch-up through SQL.
//
// A walsender sends every pgoutput message with its own send() and polls
// for replies at every WAL record, so it streams small transactions at a
// fraction of the rate the source decodes them: 200k single-row
// transactions took 2.5 s through START_REPLICATION (12 µs of walsender CPU
// each) against 1.3 s through pg_logical_slot_peek_binary_changes to the
// same client on a quiet machine, 6.8 s against 1.0 s on a busy one (make
// bench, section cdc-hot); and the walsender's CPU is taken from the
// applier's on the same cores. A stream far behind — after a snapshot copy, a worker
// restart, a write peak — therefore catches up by peeking the slot in
// large reads over a plain session, applying them exactly as streamed
// messages (same decoder, same batches, the origin's progress committed
// with each), and moving the slot with pg_replication_slot_advance once
// they are committed on the target. Nothing is acknowledged before its
// commit, as with the walsender; a crash between the commit and the advance
// re-reads transactions that the origin says are applied, and those are
// skipped. Holds (cutover) are left to the walsender: a peek stops at the
// first transaction after a HoldAt and streaming takes over.

// DefaultPeekCatchUpBytes is Options.PeekCatchUpBytes' default: a lag of
// this much WAL is read by SQL peeks.
const DefaultPeekCatchUpBytes = 16 << 20

// DefaultPeekBytes is Options.PeekBytes' default: the WAL one peek covers,
// at least. Every peek decodes the slot again from its restart_lsn (which
// moves only at the source's running-transactions records, some 15 s
// apart) before what it returns, so a peek also covers at least twice that
// span: the re-reading then costs at most half the peek. (200k single-row
// transactions, 3 peeks of 200k messages against 20 of 30k: 1.5 s against
// 3.3 s.) The source keeps a peek's result in memory up to work_mem and in
// a temporary file past it.
const DefaultPeekBytes = 32 << 20

// maxPeekSpans caps a peek at this many PeekBytes (1 GB by default): on a
// source writing so much WAL that its slot's restart lag is larger, the
// re-reading costs more than half a peek rather than a peek's result
// taking more room on the source.
const maxPeekSpans = 32

const peekSQL = `SELECT data FROM pg_logical_slot_peek_binary_changes($1, $3::pg_lsn, NULL, 'proto_version', '1', 'publication_names', $2, 'messages', 'true')`

// peekBound is where the next peek stops: PeekBytes past the slot's
// confirmed position, or twice its restart lag; insert is the source's WAL
// insert position (the peek reads all there is when upto is past it).
func (r *runner) peekBound(ctx context.Context, conn *pgx.Conn) (upto, insert pglogrepl.LSN, err error) {
	var confirmed, restart, end string
	err = conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0')::text, coalesce(restart_lsn, '0/0')::text, pg_current_wal_insert_lsn()::text
		FROM pg_replication_slots WHERE slot_name = $1`, r.o.Slot).Scan(&confirmed, &restart, &end)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, fmt.Errorf("replication slot %s does not exist", r.o.Slot)
	}
	if err != nil {
		return 0, 0, wrapOp("read replication slot "+r.o.Slot, err)
	}
	var lsn [3]pglogrepl.LSN
	for i, v := range []string{confirmed, restart, end} {
		if lsn[i], err = pglogrepl.ParseLSN(v); err != nil {
			return 0, 0, err
		}
	}
	span := min(max(r.o.PeekBytes, 2*int64(lsn[0]-min(lsn[1], lsn[0]))), maxPeekSpans*r.o.PeekBytes)
	return lsn[0] + pglogrepl.LSN(span), lsn[2], nil
}

// lagBehind is how far the source's WAL insert position is past applied.
func lagBehind(ctx context.Context, conn *pgx.Conn, applied pglogrepl.LSN) (int64, error) {
	var lag int64
	err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, applied.String()).Scan(&lag)
	if err != nil {
		return 0, wrapOp("read the source's WAL position", err)
	}
	return lag, nil
}

// holdPending says whether a HoldAt waits to be served (by the walsender).
func (r *runner) holdPending() bool {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.s.holdSet && !r.s.held
}

// catchUpBySQL peeks and applies while the applied position is more than
// PeekCatchUpBytes behind the source, and returns the position to stream
// from: start, or the last transaction it committed. The slot must not be
// streaming (no walsender holds it).
func (r *runner) catchUpBySQL(ctx context.Context, start pglogrepl.LSN) (pglogrepl.LSN, error) {
	if r.o.PeekCatchUpBytes < 0 {
		return start, nil
	}
	src, err := r.sourceConn(ctx)
	if err != nil {
		return start, err
	}
	lag, err := lagBehind(ctx, src, start)
	if err != nil || lag < r.o.PeekCatchUpBytes || r.holdPending() || start < r.noPeekBefore || r.peekOff {
		return start, err
	}
	conn, err := r.peekConn(ctx)
	if err != nil {
		return start, err
	}
	// The origin's position is committed on the target: the slot may move
	// to it (a peek that finds only transactions applied before a crash
	// must still move the slot past them).
	r.s.mu.Lock()
	r.s.applied = max(r.s.applied, start)
	r.s.mu.Unlock()
	r.serverEnd = max(r.serverEnd, start+pglogrepl.LSN(lag))
	r.s.log.Info("cdc catching up by SQL peeks", "lsn", start.String(), "lag_bytes", lag)
	r.resetDecoding()
	r.peeking = true
	defer func() { r.peeking = false; r.resetDecoding() }()
	from := start
	t0, peeks := time.Now(), 0
	for {
		upto, insert, err := r.peekBound(ctx, conn)
		if err != nil {
			return from, err
		}
		r.serverEnd = max(r.serverEnd, insert)
		// Stop at half the threshold: a stream that just fell behind does
		// not go back and forth between the two.
		if peeks > 0 && int64(insert-min(insert, from)) < r.o.PeekCatchUpBytes/2 {
			break
		}
		held, err := r.peekOnce(ctx, conn, from, upto)
		if fallBack(err) {
			// The source refused the peek itself (temp_file_limit, a
			// statement_timeout, ...): what this Run applies next comes
			// from the walsender, from the last commit.
			r.s.log.Warn("cdc SQL peek refused by the source; streaming instead", "err", err)
			r.peekOff = true
			r.rewindToCommitted(ctx)
			return max(from, r.committedEnd), nil
		}
		if err != nil {
			return from, err
		}
		peeks++
		progressed := r.committedEnd > from
		from = max(from, r.committedEnd)
		if held || upto >= insert {
			break
		}
		if !progressed {
			// Inside a transaction bigger than a peek (or one still open):
			// the walsender streams it in bounded memory, where a peek
			// would hold it whole on the source. No peeks until the stream
			// is past where the source's WAL was.
			r.noPeekBefore = insert
			r.s.log.Info("cdc transaction bigger than a SQL peek; streaming it", "lsn", from.String(), "peek_to", upto.String())
			break
		}
	}
	r.s.log.Info("cdc caught up by SQL peeks; streaming", "lsn", from.String(), "peeks", peeks, "took", time.Since(t0).Round(time.Millisecond))
	return from, nil
}

// resetDecoding forgets the relations and the transaction being read: a
// new peek or a new walsender sends its Relation messages again.
func (r *runner) resetDecoding() {
	r.dec = NewDecoder()
	clear(r.binds)
	r.inTxn, r.skipTxn, r.txnMarkers = false, false, r.txnMarkers[:0]
}

// rewindToCommitted drops what is applied but not committed on the target
// and what was being read: the next message read is the one after the last
// committed transaction.
func (r *runner) rewindToCommitted(ctx context.Context) {
	r.tg.rollback(ctx)
	r.resetDecoding()
	r.batchTxns, r.batchChanges = 0, 0
	r.lastEnd, r.lastCommit = r.committedEnd, r.committedCommit
}

// peekConn is the session that peeks (a plain one: fetch reads rows on
// r.src while a peek's result is being read).
func (r *runner) peekConn(ctx context.Context) (*pgx.Conn, error) {
	if r.peek != nil && !r.peek.IsClosed() {
		return r.peek, nil
	}
	cfg, err := r.o.sourceConfig()
	if err != nil {
		return nil, err
	}
	if r.peek, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return nil, wrapOp("connect to the source to peek slot "+r.o.Slot, err)
	}
	return r.peek, nil
}

// peekOnce reads the slot's transactions committed before upto and applies
// them, skipping transactions that commit before from (applied already), then
// commits the batch and advances the slot to it. held: it stopped before a
// transaction because a HoldAt is pending.
func (r *runner) peekOnce(ctx context.Context, conn *pgx.Conn, from, upto pglogrepl.LSN) (held bool, err error) {
	rows, ok, err := r.startPeek(ctx, conn, upto)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	r.s.mPeeks.Inc()
	skipping := false
	for ; ok; ok = rows.Next() {
		m, err := r.dec.Decode(rows.RawValues()[0])
		if err != nil {
			return false, wrapOp("decode pgoutput peeked from slot "+r.o.Slot, err)
		}
		at := r.lastEnd
		switch m := m.(type) {
		case *Begin:
			if r.holdPending() {
				held = true
			} else if skipping = m.FinalLSN < from; skipping {
				continue
			}
		case *Relation, *TypeInfo:
			// Even in a skipped transaction: later ones refer to them.
			if err := r.handle(ctx, at, m); err != nil {
				return false, err
			}
			continue
		case *Commit:
			r.setReceived(m.EndLSN)
			if skipping {
				skipping = false
				continue
			}
		case *LogicalMessage:
			at = m.LSN
		}
		if held {
			break
		}
		if skipping {
			continue
		}
		if err := r.handle(ctx, at, m); err != nil {
			return false, err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return held, &peekError{wrapOp("peek slot "+r.o.Slot, err)}
	}
	if r.inTxn { // a peek returns whole transactions
		return held, errors.New("peek of slot " + r.o.Slot + " ended inside a transaction")
	}
	if err := r.commitBatch(ctx); err != nil {
		return held, err
	}
	return held, r.advance(ctx, conn)
}

// startPeek runs the peek and reads its first row (ok: there is one). The
// slot may still be held for a moment by a walsender just closed (SQLSTATE
// 55006, which only comes with the first row): it waits for it as
// startReplication does.
func (r *runner) startPeek(ctx context.Context, conn *pgx.Conn, upto pglogrepl.LSN) (rows pgx.Rows, ok bool, err error) {
	deadline := time.Now().Add(slotBusyWait)
	for {
		rows, _ = conn.Query(ctx, peekSQL, r.o.Slot, r.o.Publication, upto.String())
		if rows.Next() {
			return rows, true, nil
		}
		rows.Close()
		err := rows.Err()
		if err == nil {
			return rows, false, nil
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return nil, false, &peekError{wrapOp("peek slot "+r.o.Slot, err)}
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// advance moves the slot to the last transaction committed on the target,
// as the walsender's acknowledgement does when streaming.
func (r *runner) advance(ctx context.Context, conn *pgx.Conn) error {
	r.s.mu.Lock()
	applied, acked := r.s.applied, r.s.acked
	r.s.mu.Unlock()
	if applied <= acked {
		return nil
	}
	if _, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, r.o.Slot, applied.String()); err != nil {
		return wrapOp("advance slot "+r.o.Slot+" to "+applied.String(), err)
	}
	r.s.mu.Lock()
	r.s.acked = max(r.s.acked, applied)
	r.s.mu.Unlock()
	r.mLag(time.Time{})
	return nil
}

// switchToPeek, between batches of a streaming applier: when the stream is
// more than PeekCatchUpBytes behind, it closes the walsender, catches up by
// SQL and streams again from where that left off. Not while a drain waits
// (a cutover's write pause would wait for the switch).
func (r *runner) switchToPeek(ctx context.Context) error {
	r.s.mu.Lock()
	draining := r.s.drains > 0
	r.s.mu.Unlock()
	if r.o.PeekCatchUpBytes < 0 || r.holdPending() || r.peekOff || draining {
		return nil
	}
	src, err := r.sourceConn(ctx)
	if err != nil {
		return err
	}
	r.s.mu.Lock()
	applied := r.s.applied
	r.s.mu.Unlock()
	if applied < r.noPeekBefore {
		return nil
	}
	lag, err := lagBehind(ctx, src, applied)
	if err != nil || lag < r.o.PeekCatchUpBytes {
		return err
	}
	r.rewindToCommitted(ctx) // between batches: nothing to drop but an empty transaction
	if r.stopWatch != nil {
		r.stopWatch()
		r.stopWatch = nil
	}
	r.repl.Close(ctx)
	r.repl = nil
	start, err := r.catchUpBySQL(ctx, applied)
	if err != nil {
		return err
	}
	return r.startReplication(ctx, start)
}

// peekError is an error of the peek query itself (not of the apply).
type peekError struct{ err error }

func (e *peekError) Error() string { return e.err.Error() }
func (e *peekError) Unwrap() error { return e.err }

// fallBack: err is the source's refusal of a peek (temp_file_limit is a
// resource error, 53400), where the walsender may still do. A lost
// connection or a server shutting down (classes 08 and 57P) is retried as
// any other.
func fallBack(err error) bool {
	var pe *peekError
	var pgErr *pgconn.PgError
	if !errors.As(err, &pe) || !errors.As(err, &pgErr) {
		return false
	}
	return !strings.HasPrefix(pgErr.Code, "08") && !strings.HasPrefix(pgErr.Code, "57P")
}
