package cdc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/semaphore"
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
// applier's on the same cores. A stream far behind — after a snapshot copy,
// a worker restart, a write peak — therefore catches up by reading the slot
// in large reads over a plain session, applying them exactly as streamed
// messages (same decoder, same batches, the origin's progress committed
// with each). The reads are of a temporary copy of the slot, consumed ahead
// of the applier, so the source's decoding and the target's writes
// overlap; the slot itself moves with pg_replication_slot_advance only to
// what is committed on the target. Nothing is acknowledged before its
// commit, as with the walsender; a crash drops the copy with its session,
// and the transactions between the slot and the origin's position are read
// again and skipped. Holds (cutover) are left to the walsender: a read
// stops at the first transaction after a HoldAt and streaming takes over.

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

const (
	peekSQL = `SELECT data FROM pg_logical_slot_peek_binary_changes($1, $3::pg_lsn, NULL, 'proto_version', '1', 'publication_names', $2, 'messages', 'true')`
	getSQL  = `SELECT data FROM pg_logical_slot_get_binary_changes($1, $3::pg_lsn, NULL, 'proto_version', '1', 'publication_names', $2, 'messages', 'true')`
)

// peekBound is where the next read of slot stops: PeekBytes past its
// confirmed position, or twice its restart lag; confirmed is where that read
// starts, insert the source's WAL insert position (the read takes all there
// is when upto is past it).
func (o *Options) peekBound(ctx context.Context, conn *pgx.Conn, slot string) (upto, confirmed, insert pglogrepl.LSN, err error) {
	var confirmedS, restartS, insertS string
	err = conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0')::text, coalesce(restart_lsn, '0/0')::text, pg_current_wal_insert_lsn()::text
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmedS, &restartS, &insertS)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, 0, fmt.Errorf("replication slot %s does not exist", slot)
	}
	if err != nil {
		return 0, 0, 0, wrapOp("read replication slot "+slot, err)
	}
	var lsn [3]pglogrepl.LSN
	for i, v := range []string{confirmedS, restartS, insertS} {
		if lsn[i], err = pglogrepl.ParseLSN(v); err != nil {
			return 0, 0, 0, err
		}
	}
	span := min(max(o.PeekBytes, 2*int64(lsn[0]-min(lsn[1], lsn[0]))), maxPeekSpans*o.PeekBytes)
	return lsn[0] + pglogrepl.LSN(span), lsn[0], lsn[2], nil
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

// catchUpBySQL reads and applies by SQL while the applied position is more
// than PeekCatchUpBytes behind the source, and returns the position to
// stream from: start, or the last transaction it committed. The slot must
// not be streaming (no walsender holds it).
//
// The reading (a feeder goroutine, on its own session) runs ahead of the
// applying: it copies the slot into a temporary one and consumes that copy
// with pg_logical_slot_get_binary_changes, so the source decodes the next
// span while the target writes this one. The slot itself moves only to what
// the target committed (pg_replication_slot_advance, which reads the WAL
// without decoding its changes: 0.15 s against 1.0 s for 200k
// transactions); the copy dies with its session, so a crash leaves only the
// slot, at or before the origin's position. Where the source refuses the
// copy (no free replication slot), it peeks the slot itself, one span at a
// time: each waits for the previous one's commit.
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
	f := newFeed(r, conn)
	if !r.o.PeekInPlace {
		f.copySlot(ctx)
	}
	r.s.log.Info("cdc catching up by SQL peeks", "lsn", start.String(), "lag_bytes", lag, "read_ahead", f.copy != "")
	r.resetDecoding()
	r.peeking = true
	defer func() { r.peeking = false; r.resetDecoding() }()
	t0 := time.Now()
	go f.run(ctx)
	from, peeks, err := r.applyFeed(ctx, f, start)
	if fallBack(err) {
		// The source refused the peek itself (temp_file_limit, a
		// statement_timeout, ...): what this Run applies next comes from
		// the walsender, from the last commit.
		r.s.log.Warn("cdc SQL peek refused by the source; streaming instead", "err", err)
		r.peekOff = true
		r.rewindToCommitted(ctx)
		return max(from, r.committedEnd), nil
	}
	if err != nil {
		return from, err
	}
	// The slot follows the last commit before the walsender takes over.
	if err := r.advance(ctx, conn); err != nil {
		return from, err
	}
	r.s.log.Info("cdc caught up by SQL peeks; streaming", "lsn", from.String(), "peeks", peeks, "took", time.Since(t0).Round(time.Millisecond))
	return from, nil
}

// applyFeed applies what f reads, committing at the end of every span, and
// returns the position after the last transaction committed. It always
// stops f and waits for it.
func (r *runner) applyFeed(ctx context.Context, f *feed, start pglogrepl.LSN) (from pglogrepl.LSN, peeks int, err error) {
	defer func() {
		f.stop()
		for range f.chunks { // f may be blocked on a send
		}
	}()
	from = start
	skipping, held := false, false
	for c := range f.chunks {
		f.room.Release(c.room())
		if c.err != nil {
			return from, peeks, c.err
		}
		for _, m := range c.msgs {
			if held {
				break
			}
			at := r.lastEnd
			switch m := m.(type) {
			case *Begin:
				if r.holdPending() {
					held = true
					continue
				}
				if skipping = m.FinalLSN < from; skipping {
					continue
				}
			case *Relation, *TypeInfo:
				// Even in a skipped transaction: later ones refer to them.
				if err := r.handle(ctx, at, m); err != nil {
					return from, peeks, err
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
			if skipping {
				continue
			}
			if err := r.handle(ctx, at, m); err != nil {
				return from, peeks, err
			}
		}
		if held {
			// A hold is served by the walsender: the transaction it stops
			// before (no part of it is applied) is read again from there.
			if err := r.commitBatch(ctx); err != nil {
				return from, peeks, err
			}
			return max(from, r.committedEnd), peeks, nil
		}
		if !c.end {
			continue
		}
		peeks++
		r.serverEnd = max(r.serverEnd, c.insert)
		if r.inTxn { // a peek returns whole transactions
			return from, peeks, errors.New("peek of slot " + r.o.Slot + " ended inside a transaction")
		}
		if err := r.commitBatch(ctx); err != nil {
			return from, peeks, err
		}
		from = max(from, r.committedEnd)
		if c.bigTxn {
			// Inside a transaction bigger than a peek (or one still open):
			// the walsender streams it in bounded memory, where a peek
			// would hold it whole on the source. No peeks until the stream
			// is past where the source's WAL was.
			r.noPeekBefore = c.insert
			r.s.log.Info("cdc transaction bigger than a SQL peek; streaming it", "lsn", from.String(), "peek_to", c.upto.String())
		}
		select {
		case f.acks <- struct{}{}:
		default:
		}
	}
	return from, peeks, nil
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
	r.batchTxns = 0
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

// advance moves the slot to the last transaction committed on the target,
// as the walsender's acknowledgement does when streaming.
func (r *runner) advance(ctx context.Context, conn *pgx.Conn) error {
	if err := advanceSlot(ctx, conn, r.s, r.o.Slot); err != nil {
		return err
	}
	r.mLag(time.Time{})
	return nil
}

// advanceSlot moves slot to s's applied position (committed on the target)
// and records it as acknowledged.
func advanceSlot(ctx context.Context, conn *pgx.Conn, s *Stream, slot string) error {
	s.mu.Lock()
	applied, acked := s.applied, s.acked
	s.mu.Unlock()
	if applied <= acked {
		return nil
	}
	err := whileSlotBusy(ctx, func() error {
		// Never behind the slot (which refuses that): a target whose
		// origin is behind the slot's start has nothing to acknowledge.
		_, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance(slot_name, greatest($2::pg_lsn, confirmed_flush_lsn))
			FROM pg_replication_slots WHERE slot_name = $1`, slot, applied.String())
		return err
	})
	if err != nil {
		return wrapOp("advance slot "+slot+" to "+applied.String(), err)
	}
	s.mu.Lock()
	s.acked = max(s.acked, applied)
	s.mu.Unlock()
	return nil
}

// feed reads a slot's changes by SQL for catchUpBySQL on its own session,
// beside the applier: it uses only the runner's options and, under its
// lock, the stream's positions.
type feed struct {
	r    *runner
	conn *pgx.Conn
	dec  *Decoder // the applier's decoding is done here, on the feed's core
	// copy is the temporary copy of the slot that is read ahead of the
	// applier; empty, the slot itself is peeked.
	copy   string
	chunks chan feedChunk
	// room bounds the bytes of messages read and not yet applied
	// (feedAheadBytes).
	room *semaphore.Weighted
	// stopped ends when the applier quits (stop).
	stopped context.Context
	stop    context.CancelFunc
	acks    chan struct{} // the applier committed a read (needed to peek the next)
}

func newFeed(r *runner, conn *pgx.Conn) *feed {
	f := &feed{r: r, conn: conn, dec: NewDecoder(), room: semaphore.NewWeighted(feedAheadBytes),
		chunks: make(chan feedChunk, feedAheadBytes/(64<<10)), acks: make(chan struct{}, 1)}
	f.stopped, f.stop = context.WithCancel(context.Background())
	return f
}

// feedAheadBytes bounds what the feed reads ahead of the applier: the
// pgoutput messages of this many bytes, decoded. A read's result is held
// on the source until it is read whole, and the next read starts after it:
// the feed must be able to hold about a read (PeekBytes of WAL yields less
// in messages, whose full-page images and index records it leaves out) for
// the source to decode the next one while the target writes this one.
const feedAheadBytes = 64 << 20

// feedChunk is some of one read's messages, decoded, in order; bytes is
// their size as read (what they take of the feed's room).
type feedChunk struct {
	msgs  []Message
	bytes int
	// end: the read's last messages; upto is where it stopped and insert
	// the source's WAL position before it. bigTxn: it found nothing before
	// upto, which is short of insert: a transaction bigger than a read.
	end          bool
	upto, insert pglogrepl.LSN
	bigTxn       bool
	err          error
}

// room is what c takes of the feed's room: its bytes, or the whole room for
// a message bigger than that.
func (c feedChunk) room() int64 { return int64(min(c.bytes, feedAheadBytes)) }

// Chunks carry at most this many messages or bytes of them.
const (
	chunkMsgs  = 2048
	chunkBytes = 1 << 20
)

// copySlot makes the temporary copy that the feed reads ahead. A refusal
// (no free replication slot, for one) leaves the feed peeking the slot
// itself.
func (f *feed) copySlot(ctx context.Context) {
	name := fmt.Sprintf("%s_p%08x", f.r.o.Slot, rand.Uint32())
	if _, err := f.conn.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2, true)`, f.r.o.Slot, name); err != nil {
		f.r.s.log.Warn("cdc could not copy slot "+f.r.o.Slot+" to read ahead of the applier; peeking it one read at a time", "err", err)
		return
	}
	f.copy = name
}

func (f *feed) send(c feedChunk) bool {
	if c.bytes > 0 && f.room.Acquire(f.stopped, c.room()) != nil {
		return false
	}
	select {
	case f.chunks <- c:
		return true
	case <-f.stopped.Done():
		return false
	}
}

// run reads until the source's WAL is less than half PeekCatchUpBytes
// ahead, a hold is pending, a read finds a transaction bigger than itself,
// or the applier quits; then it drops the copy and closes f.chunks.
func (f *feed) run(ctx context.Context) {
	defer close(f.chunks)
	defer f.dropCopy()
	o := f.r.o
	slot, query := o.Slot, peekSQL
	if f.copy != "" {
		slot, query = f.copy, getSQL
	}
	for reads := 0; ; reads++ {
		if reads > 0 && f.copy == "" {
			// A peek starts at the slot's confirmed position: the last
			// one must be committed and the slot moved past it.
			select {
			case <-f.acks:
			case <-f.stopped.Done():
				return
			}
		}
		if f.stopped.Err() != nil || f.r.holdPending() {
			return
		}
		if err := advanceSlot(ctx, f.conn, f.r.s, o.Slot); err != nil {
			f.send(feedChunk{err: err})
			return
		}
		upto, from, insert, err := o.peekBound(ctx, f.conn, slot)
		if err != nil {
			f.send(feedChunk{err: err})
			return
		}
		// Stop at half the threshold: a stream that just fell behind does
		// not go back and forth between the two.
		if reads > 0 && int64(insert-min(insert, from)) < o.PeekCatchUpBytes/2 {
			return
		}
		var n int
		err = whileSlotBusy(ctx, func() error {
			n, err = f.read(ctx, query, slot, upto)
			return err
		})
		var de *decodeError
		switch {
		case errors.Is(err, errFeedStopped):
			return
		case errors.As(err, &de):
			f.send(feedChunk{err: de.err})
			return
		case err != nil:
			f.send(feedChunk{err: &peekError{wrapOp("read slot "+slot+" by SQL", err)}})
			return
		}
		f.r.s.mPeeks.Inc()
		big := n == 0 && upto < insert
		if !f.send(feedChunk{end: true, upto: upto, insert: insert, bigTxn: big}) || big || upto >= insert {
			return
		}
	}
}

var errFeedStopped = errors.New("feed stopped")

// decodeError is a message the feed could not decode (not the source's
// refusal of a read).
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

// read runs one read and sends its messages, decoded (the decoder copies
// what it keeps out of the rows' buffers), in chunks; n is how many there
// were.
func (f *feed) read(ctx context.Context, query, slot string, upto pglogrepl.LSN) (n int, err error) {
	rows, _ := f.conn.Query(ctx, query, slot, f.r.o.Publication, upto.String())
	defer rows.Close()
	var c feedChunk
	for rows.Next() {
		if f.stopped.Err() != nil {
			return n, errFeedStopped
		}
		raw := rows.RawValues()[0]
		m, err := f.dec.Decode(raw)
		if err != nil {
			return n, &decodeError{wrapOp("decode pgoutput read from slot "+f.r.o.Slot, err)}
		}
		c.msgs = append(c.msgs, m)
		n++
		if c.bytes += len(raw); len(c.msgs) >= chunkMsgs || c.bytes >= chunkBytes {
			if !f.send(c) {
				return n, errFeedStopped
			}
			c = feedChunk{}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return n, err
	}
	if len(c.msgs) > 0 && !f.send(c) {
		return n, errFeedStopped
	}
	return n, nil
}

// dropCopy drops the temporary copy (it would go with the session anyway,
// but a session lost or cancelled may linger a moment on the source).
func (f *feed) dropCopy() {
	if f.copy == "" || f.conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, f.copy); err != nil {
		f.r.s.log.Warn("cdc could not drop the temporary copy of slot "+f.r.o.Slot+"; it goes with its session", "copy", f.copy, "err", err)
	}
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
