package cdc

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/semaphore"

	"github.com/reshard/reshard/internal/pgerr"
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
// with each). The reads are of temporary copies of the slot, consumed ahead
// of the applier by two sessions in turn (feed), so the source's decoding,
// its sending and the target's writes overlap; the slot itself moves with
// pg_replication_slot_advance only to what is committed on the target.
// Nothing is acknowledged before its commit, as with the walsender; a
// crash drops the copies with their sessions, and the transactions between
// the slot and the origin's position are read again and skipped. Holds
// (cutover) are left to the walsender: a read stops at the first
// transaction after a HoldAt and streaming takes over.

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
// The reading (the feed's readers, each a goroutine on its own session)
// runs ahead of the applying: each copies the slot into a temporary one and
// consumes its copy with pg_logical_slot_get_binary_changes, span by span
// in turn with the other, so the source decodes the next span while this
// one is sent and written. The slot itself moves only to what the target
// committed (pg_replication_slot_advance, which reads the WAL without
// decoding its changes: 0.15 s against 1.0 s for 200k transactions); a
// copy dies with its session, so a crash leaves only the slot, at or before
// the origin's position. Where the source refuses the second copy, one
// reader reads every span; where it refuses the first (no free replication
// slot), one reader peeks the slot itself, one span at a time: each waits
// for the previous one's commit.
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
	conn, err := r.peekConn(ctx, 0)
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
	f := newFeed(r)
	if err := f.addReaders(ctx, conn, r.o.PeekInPlace); err != nil {
		return start, err
	}
	r.s.log.Info("cdc catching up by SQL peeks", "lsn", start.String(), "lag_bytes", lag, "read_ahead", f.readers[0].copy != "", "readers", len(f.readers))
	r.resetDecoding()
	r.peeking = true
	defer func() { r.peeking = false; r.resetDecoding() }()
	t0 := time.Now()
	f.run(ctx)
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
		<-f.done
	}()
	from = start
	skipping, held := false, false
	// A span is applied for as long as the target takes (a copy gate that
	// holds and reads the copy's progress per transaction, a slow target):
	// the slot follows what is committed meanwhile, every StatusInterval
	// as the walsender's status updates do, so that it retains the
	// stream's lag and not a span's. Only while the readers read copies:
	// a peek of the slot itself holds it.
	follow := f.readers[0].copy != ""
	nextAdvance := time.Now().Add(r.o.StatusInterval)
	advancedTo := r.committedEnd
	for c := range f.chunks() {
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
			// committedEnd moves only with a batch's commit: the clock
			// is read at most once a batch.
			if follow && r.committedEnd > advancedTo && !time.Now().Before(nextAdvance) {
				advancedTo, nextAdvance = r.committedEnd, time.Now().Add(r.o.StatusInterval)
				src, err := r.sourceConn(ctx)
				if err != nil {
					return from, peeks, err
				}
				if err := r.advance(ctx, src); err != nil {
					return from, peeks, err
				}
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
			return from, peeks, nil
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

// peekConn is the feed's i-th session (a plain one: fetch reads rows on
// r.src while a peek's result is being read), kept for the next catch-up
// if it still answers.
func (r *runner) peekConn(ctx context.Context, i int) (*pgx.Conn, error) {
	if i < len(r.peeks) && !r.peeks[i].IsClosed() {
		// Kept since the last catch-up: the source may have ended it
		// since (a reader killed between its reads), unseen until used.
		if r.peeks[i].Ping(ctx) == nil {
			return r.peeks[i], nil
		}
		r.peeks[i].Close(ctx)
	}
	cfg, err := r.o.sourceConfig()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, wrapOp("connect to the source to peek slot "+r.o.Slot, err)
	}
	if i < len(r.peeks) {
		r.peeks[i] = conn
	} else {
		r.peeks = append(r.peeks, conn)
	}
	return conn, nil
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

// feed reads a slot's changes by SQL for catchUpBySQL beside the applier,
// in spans of WAL: each is read by one of its readers (sessions), which
// take turns; the spans reach the applier in the order of the WAL. It uses
// only the runner's options and, under its lock, the stream's positions.
//
// A read's result is decoded whole on the source before its first row is
// sent (pg_logical_slot_get_binary_changes keeps it in a tuplestore), so a
// single session alternates: the source decodes, then sends, then decodes
// the next span (200k single-row transactions, 62 MB of WAL in two reads:
// 0.56 s to the first row of each, 0.9 s each in all, one after the other).
// Two readers, each with its own copy of the slot, decode the next span
// while this one is sent and applied: the second copy is moved to where the
// first read stops (pg_replication_slot_advance, which decodes without
// output) and read from there. A read of a slot that stops at upto returns
// the transactions whose commit record starts before upto, and a slot moved
// to upto returns those whose commit record starts at or after it: the
// spans meet without a gap or an overlap. Spans stop short of the source's
// flushed WAL (where both stop anyway) except the last.
type feed struct {
	r       *runner
	readers []*feedReader
	spans   chan *feedSpan // in the order of the WAL; closed after the last
	// stopped ends when the applier quits (stop); done closes when every
	// reader quit and the copies are dropped.
	stopped context.Context
	stop    context.CancelFunc
	done    chan struct{}
	acks    chan struct{} // the applier committed a read (needed to peek the slot itself again)
}

// feedReader is one session of a feed and the copy of the slot it reads
// (empty: it peeks the slot itself, one read at a time).
type feedReader struct {
	i    int // its place in the feed's turns
	conn *pgx.Conn
	copy string
	dec  *Decoder // the applier's decoding is done here, on the reader's core
	// room bounds the bytes of messages this reader read and the applier
	// did not apply yet (roomBytes: the feed's share of feedAheadBytes).
	room      *semaphore.Weighted
	roomBytes int64
	turn      chan spanTurn // this reader plans the next span
}

// spanTurn is the next span to plan: its number and, past the first, where
// the span before it stops.
type spanTurn struct {
	k     int
	start pglogrepl.LSN
}

// feedSpan is one read's messages, in chunks, as its reader sends them
// (chunks closes after the last).
type feedSpan struct {
	rd     *feedReader
	chunks chan feedChunk
}

// CatchUpSlots is how many temporary copies of its slot a catch-up reads
// with, when the source can spare them: the feed's readers.
const CatchUpSlots = 2

const feedReaders = CatchUpSlots

func newFeed(r *runner) *feed {
	f := &feed{r: r, spans: make(chan *feedSpan, feedReaders), done: make(chan struct{}), acks: make(chan struct{}, 1)}
	f.stopped, f.stop = context.WithCancel(context.Background())
	return f
}

func (f *feed) addReader(conn *pgx.Conn, copy string) {
	f.readers = append(f.readers, &feedReader{i: len(f.readers), conn: conn, copy: copy, dec: NewDecoder(), turn: make(chan spanTurn, 1)})
}

// source is the slot rd reads and the query that reads it.
func (rd *feedReader) source(o *Options) (slot, query string) {
	if rd.copy != "" {
		return rd.copy, getSQL
	}
	return o.Slot, peekSQL
}

// feedAheadBytes bounds what the feed reads ahead of the applier: the
// pgoutput messages of this many bytes, decoded. A read's result is held
// on the source until it is read whole, and the next read starts after it:
// the feed must be able to hold about a read (PeekBytes of WAL yields less
// in messages, whose full-page images and index records it leaves out) for
// the source to decode the next one while the target writes this one.
const feedAheadBytes = 64 << 20

// feedChunk is some of one read's messages, decoded, in order; bytes is
// their size as read, held what they take of their reader's room.
type feedChunk struct {
	msgs  []Message
	bytes int
	held  int64
	// end: the read's last messages; upto is where it stopped and insert
	// the source's WAL position before it. bigTxn: it found nothing before
	// upto, which is short of insert: a transaction bigger than a read.
	end          bool
	upto, insert pglogrepl.LSN
	bigTxn       bool
	err          error
}

// Chunks carry at most this many messages or bytes of them.
const (
	chunkMsgs  = 2048
	chunkBytes = 1 << 20
)

// addReaders gives f its readers: up to feedReaders sessions on copies of
// the slot, the first on conn; or, where the source refuses the first copy
// (no free replication slot, for one), conn alone, peeking the slot itself.
// A session lost is an error (the Run's retry reconnects), not a refusal.
func (f *feed) addReaders(ctx context.Context, conn *pgx.Conn, inPlace bool) error {
	copies := feedReaders
	if inPlace {
		copies = 0
	}
	for i := range copies {
		if i > 0 {
			var err error
			if conn, err = f.r.peekConn(ctx, i); err != nil {
				f.r.s.log.Warn("cdc could not open another session to read slot "+f.r.o.Slot+" ahead", "err", err)
				break
			}
		}
		name := fmt.Sprintf("%s_p%08x", f.r.o.Slot, rand.Uint32())
		if _, err := conn.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2, true)`, f.r.o.Slot, name); err != nil {
			if pgerr.ConnectionLost(err) || ctx.Err() != nil {
				f.dropCopies()
				return wrapOp("copy slot "+f.r.o.Slot, err)
			}
			how := "peeking it one read at a time"
			if i > 0 {
				how = fmt.Sprintf("reading it with %d of %d copies", i, feedReaders)
			}
			f.r.s.log.Warn("cdc could not copy slot "+f.r.o.Slot+" to read ahead of the applier; "+how, "err", err)
			break
		}
		f.addReader(conn, name)
	}
	if len(f.readers) == 0 {
		f.addReader(conn, "")
	}
	for _, rd := range f.readers {
		rd.roomBytes = feedAheadBytes / int64(len(f.readers))
		rd.room = semaphore.NewWeighted(rd.roomBytes)
	}
	return nil
}

// dropCopies drops the readers' copies (see dropCopy).
func (f *feed) dropCopies() {
	for _, rd := range f.readers {
		rd.dropCopy(f.r)
	}
}

// send passes c to the applier in sp, once the reader has room for it (a
// message bigger than the room takes it all).
func (f *feed) send(sp *feedSpan, c feedChunk) bool {
	c.held = min(int64(c.bytes), sp.rd.roomBytes)
	if c.held > 0 && sp.rd.room.Acquire(f.stopped, c.held) != nil {
		return false
	}
	select {
	case sp.chunks <- c:
		return true
	case <-f.stopped.Done():
		return false
	}
}

// chunks yields the spans' chunks in order, each once its room is given
// back to its reader. A span that ends with neither its end nor an error
// (which no reader sends) would leave out the rest of its read: it yields
// an error.
func (f *feed) chunks() iter.Seq[feedChunk] {
	return func(yield func(feedChunk) bool) {
		for sp := range f.spans {
			ended := false
			for c := range sp.chunks {
				sp.rd.room.Release(c.held)
				ended = c.end || c.err != nil
				if !yield(c) {
					return
				}
			}
			if !ended {
				yield(feedChunk{err: errors.New("a read of slot " + f.r.o.Slot + " by SQL ended before its end")})
				return
			}
		}
	}
}

// push passes sp to the applier, after the spans before it.
func (f *feed) push(sp *feedSpan) bool {
	select {
	case f.spans <- sp:
		return true
	case <-f.stopped.Done():
		return false
	}
}

// run starts the readers, the first with the first span; it returns at
// once. The feed reads until the source's WAL is less than half
// PeekCatchUpBytes ahead, a hold is pending, a read finds a transaction
// bigger than itself, or the applier quits; then it drops the copies and
// closes done.
func (f *feed) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range f.readers {
		wg.Go(func() { f.runReader(ctx, i) })
	}
	f.readers[0].turn <- spanTurn{}
	go func() {
		wg.Wait()
		f.dropCopies()
		close(f.done)
	}()
}

// runReader plans the spans it is given the turn for, passes the turn to
// the next reader, and reads them. The reader with the turn is the only one
// to push a span or close f.spans.
func (f *feed) runReader(ctx context.Context, i int) {
	rd := f.readers[i]
	for {
		var t spanTurn
		select {
		case t = <-rd.turn:
		case <-f.stopped.Done():
			return
		}
		sp, plan, more, err := f.plan(ctx, rd, t)
		if err != nil {
			sp = &feedSpan{rd: rd, chunks: make(chan feedChunk, 1)}
			sp.chunks <- feedChunk{err: err}
			close(sp.chunks)
			f.push(sp)
			close(f.spans)
			return
		}
		if sp == nil {
			close(f.spans)
			return
		}
		if !f.push(sp) {
			return
		}
		if more {
			f.readers[(i+1)%len(f.readers)].turn <- spanTurn{k: t.k + 1, start: plan.upto}
		} else {
			close(f.spans)
		}
		if !f.read(ctx, sp, plan) {
			return
		}
	}
}

// spanPlan is where one read starts (from), stops (upto), and the source's
// WAL positions when it was planned; confirmed is the position of the slot
// read (its copy's).
type spanPlan struct {
	from, upto, confirmed, insert pglogrepl.LSN
}

// plan makes span t: it moves the slot to what the target committed and
// bounds the read. Nil: no more spans. more: the next span starts where
// this one stops.
func (f *feed) plan(ctx context.Context, rd *feedReader, t spanTurn) (sp *feedSpan, p spanPlan, more bool, err error) {
	o := f.r.o
	if t.k > 0 && rd.copy == "" {
		// A peek starts at the slot's confirmed position: the last one
		// must be committed and the slot moved past it.
		select {
		case <-f.acks:
		case <-f.stopped.Done():
			return nil, p, false, nil
		}
	}
	if f.stopped.Err() != nil || f.r.holdPending() {
		return nil, p, false, nil
	}
	if err := advanceSlot(ctx, rd.conn, f.r.s, o.Slot); err != nil {
		return nil, p, false, err
	}
	slot, _ := rd.source(o)
	pos, err := readSlot(ctx, rd.conn, slot)
	if err != nil {
		return nil, p, false, err
	}
	p.from, p.confirmed, p.insert = pos.confirmed, pos.confirmed, pos.insert
	if t.k > 0 && rd.copy != "" {
		p.from = t.start
	}
	// Stop at half the threshold: a stream that just fell behind does not
	// go back and forth between the two.
	if t.k > 0 && int64(pos.insert-min(pos.insert, p.from)) < o.PeekCatchUpBytes/2 {
		return nil, p, false, nil
	}
	p.upto = p.from + pglogrepl.LSN(o.spanBytes(p.from, pos.restart))
	sp = &feedSpan{rd: rd, chunks: make(chan feedChunk, rd.roomBytes/(64<<10))}
	if rd.copy == "" {
		// The next peek waits for this one's commit.
		return sp, p, p.upto < pos.insert, nil
	}
	return sp, p, p.upto < pos.flush, nil
}

// spanBytes is the WAL a read from from covers: PeekBytes, or twice the
// restart lag of the slot read (restart its restart_lsn).
func (o *Options) spanBytes(from, restart pglogrepl.LSN) int64 {
	return min(max(o.PeekBytes, 2*int64(from-min(restart, from))), maxPeekSpans*o.PeekBytes)
}

// slotPosition is a slot's positions and the source's WAL positions.
type slotPosition struct {
	confirmed, restart, insert, flush pglogrepl.LSN
}

func readSlot(ctx context.Context, conn *pgx.Conn, slot string) (slotPosition, error) {
	var v [4]string
	err := conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn, '0/0')::text, coalesce(restart_lsn, '0/0')::text,
		pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&v[0], &v[1], &v[2], &v[3])
	if errors.Is(err, pgx.ErrNoRows) {
		return slotPosition{}, fmt.Errorf("replication slot %s does not exist", slot)
	}
	if err != nil {
		return slotPosition{}, wrapOp("read replication slot "+slot, err)
	}
	var lsn [4]pglogrepl.LSN
	for i := range v {
		if lsn[i], err = pglogrepl.ParseLSN(v[i]); err != nil {
			return slotPosition{}, err
		}
	}
	return slotPosition{confirmed: lsn[0], restart: lsn[1], insert: lsn[2], flush: lsn[3]}, nil
}

// read moves rd's copy to where sp starts and reads sp, sending its
// messages, decoded, in chunks (the decoder copies what it keeps out of the
// rows' buffers), then its end. False: the reader is done (the applier
// quit, or the read failed and the applier is told).
func (f *feed) read(ctx context.Context, sp *feedSpan, p spanPlan) bool {
	defer close(sp.chunks)
	rd := sp.rd
	slot, query := rd.source(f.r.o)
	fail := func(err error) bool {
		f.send(sp, feedChunk{err: err})
		return false
	}
	if rd.copy != "" && p.confirmed < p.from {
		if err := moveCopy(ctx, rd.conn, rd.copy, p.from); err != nil {
			return fail(err)
		}
	}
	var n int
	t0 := time.Now()
	err := whileSlotBusy(ctx, func() error {
		var err error
		n, err = f.readRows(ctx, sp, query, slot, p.upto)
		return err
	})
	var de *decodeError
	switch {
	case errors.Is(err, errFeedStopped):
		return false
	case errors.As(err, &de):
		return fail(de.err)
	case err != nil:
		return fail(&peekError{wrapOp("read slot "+slot+" by SQL", err)})
	}
	f.r.s.mPeeks.Inc()
	f.r.s.log.Debug("cdc SQL read", "reader", rd.i, "from", p.from.String(), "upto", p.upto.String(), "messages", n, "took", time.Since(t0).Round(time.Millisecond))
	big := n == 0 && p.upto < p.insert
	return f.send(sp, feedChunk{end: true, upto: p.upto, insert: p.insert, bigTxn: big}) && !big
}

// moveCopy moves copy (a reader's copy of the slot, not being read) to to,
// where the read before it stops. A slot moves no further than the
// source's flushed WAL, which to never passes: anything short of it would
// read transactions twice.
func moveCopy(ctx context.Context, conn *pgx.Conn, copy string, to pglogrepl.LSN) error {
	var endS string
	err := conn.QueryRow(ctx, `SELECT end_lsn::text FROM pg_replication_slot_advance($1, $2::pg_lsn)`, copy, to.String()).Scan(&endS)
	if err != nil {
		return wrapOp("advance slot "+copy+" to "+to.String(), err)
	}
	end, err := pglogrepl.ParseLSN(endS)
	if err != nil {
		return err
	}
	if end < to {
		return fmt.Errorf("slot %s advanced to %s, short of %s", copy, end, to)
	}
	return nil
}

var errFeedStopped = errors.New("feed stopped")

// decodeError is a message the feed could not decode (not the source's
// refusal of a read).
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }

// readRows runs one read and sends its messages in chunks; n is how many
// there were.
func (f *feed) readRows(ctx context.Context, sp *feedSpan, query, slot string, upto pglogrepl.LSN) (n int, err error) {
	rows, _ := sp.rd.conn.Query(ctx, query, slot, f.r.o.Publication, upto.String())
	defer rows.Close()
	var c feedChunk
	for rows.Next() {
		if f.stopped.Err() != nil {
			return n, errFeedStopped
		}
		raw := rows.RawValues()[0]
		m, err := sp.rd.dec.Decode(raw)
		if err != nil {
			return n, &decodeError{wrapOp("decode pgoutput read from slot "+f.r.o.Slot, err)}
		}
		c.msgs = append(c.msgs, m)
		n++
		if c.bytes += len(raw); len(c.msgs) >= chunkMsgs || c.bytes >= chunkBytes {
			if !f.send(sp, c) {
				return n, errFeedStopped
			}
			c = feedChunk{}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return n, err
	}
	if len(c.msgs) > 0 && !f.send(sp, c) {
		return n, errFeedStopped
	}
	return n, nil
}

// dropCopy drops rd's copy of the slot (it would go with its session
// anyway, but a session lost or cancelled may linger a moment on the
// source).
func (rd *feedReader) dropCopy(r *runner) {
	if rd.copy == "" || rd.conn.IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rd.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, rd.copy); err != nil {
		r.s.log.Warn("cdc could not drop the temporary copy of slot "+r.o.Slot+"; it goes with its session", "copy", rd.copy, "err", err)
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
// connection or a server shutting down is retried as any other.
func fallBack(err error) bool {
	var pe *peekError
	var pgErr *pgconn.PgError
	return errors.As(err, &pe) && errors.As(err, &pgErr) && !pgerr.ConnectionLost(err)
}
