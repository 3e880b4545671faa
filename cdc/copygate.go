package cdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/tableset"
)

// The copy gate lets the stream run while the copy does (Options.CopyGate,
// backfill.Options.StreamDuringCopy), so that the slot retains the
// stream's lag, not the copy's length, of WAL.
//
// The copy pages each table by primary key, one unit per table, and keeps
// in its checkpoint row on the target (backfill's reshard.copy_checkpoint)
// two positions: last_pk, everything up to which is committed on the
// target, and reading_pk, the end of the furthest chunk whose read has
// started (reading_all: the last chunk, which runs to the end of the
// table). The copy fixes a chunk's end and records it, committed, before it
// takes the chunk's snapshot on the source; it registers every unit before
// it reads any chunk. For a change to the row with primary key k:
//
//   - k ≤ last_pk, or the unit done: apply it. The row's chunk is on the
//     target; an older image re-applied converges, since every later change
//     of the key follows in commit order and is applied too.
//   - k in (last_pk, reading_pk], or past last_pk while reading_all: hold
//     until the chunk commits. Applied before, the chunk's older snapshot
//     would overwrite it; skipped, it would be lost if the snapshot was
//     taken before the change committed.
//   - past reading_pk, or the table's units not registered: skip it. Its
//     chunk has not started, and it starts after this read of the progress,
//     so its snapshot sees the change, provided the read came after the
//     change's transaction was visible on the source (a transaction reaches
//     the stream before other snapshots see it: visible.go). A delete is
//     skipped too: the copy will not find the row.
//
// A key change is a delete of the old key and a write of the new one, each
// gated by its own key; a change holds while either of its keys does. The
// held stream keeps its target transaction open: what it wrote there has
// keys at or below last_pk as read then, which no later chunk writes, so
// the chunk it waits for never waits for its locks. The replication origin
// moves only with the target transaction, past changes applied or skipped:
// a replay after a kill decides again, against the progress as it is then.

// GateDecision is what the gate says of one key.
type GateDecision int

const (
	// GateApply: the key's chunk is on the target; apply the change.
	GateApply GateDecision = iota
	// GateSkip: the key's chunk has not started; the copy will read it.
	GateSkip
	// GateHold: the key's chunk is being copied; wait for its commit.
	GateHold
)

func (d GateDecision) String() string {
	switch d {
	case GateApply:
		return "apply"
	case GateSkip:
		return "skip"
	case GateHold:
		return "hold"
	}
	return "gate(" + strconv.Itoa(int(d)) + ")"
}

// CopyProgress is one table's copy progress as the gate reads it.
type CopyProgress struct {
	// Registered: the copy has recorded the table's unit. An unregistered
	// table has copied nothing and read nothing.
	Registered bool
	Done       bool
	// Copied is the primary key of the last row committed (nil: none yet).
	Copied []string
	// ReadingTo is the end of the furthest chunk whose read has started
	// (nil: none past Copied); ReadingAll: a chunk runs to the table's end.
	ReadingTo  []string
	ReadingAll bool
}

// KeyOrder compares primary keys of one table as the copy's ORDER BY does.
type KeyOrder struct {
	table string
	cols  []string
	kinds []keyKind
}

type keyKind int

const (
	keyInt keyKind = iota
	keyUUID
)

// NewKeyOrder is t's primary-key order, or an error naming the column whose
// type the gate cannot order as the server does (only integer and uuid
// primary keys: a text key orders by its collation).
func NewKeyOrder(t tableset.Table) (KeyOrder, error) {
	o := KeyOrder{table: t.String(), cols: t.PK}
	if len(t.PK) == 0 {
		return KeyOrder{}, fmt.Errorf("stream during the copy: table %s has no primary key; stream it after the copy (--stream-during-copy=false, or the default then)", t)
	}
	for _, name := range t.PK {
		c, ok := t.Column(name)
		if !ok {
			return KeyOrder{}, fmt.Errorf("stream during the copy: primary-key column %s of %s is not among its columns", name, t)
		}
		switch strings.TrimSpace(c.Type) {
		case "smallint", "integer", "bigint":
			o.kinds = append(o.kinds, keyInt)
		case "uuid":
			o.kinds = append(o.kinds, keyUUID)
		default:
			return KeyOrder{}, fmt.Errorf("stream during the copy: primary-key column %s of %s is of type %s; the gate orders only integer and uuid keys as the server does: stream this keyspace after the copy (--stream-during-copy=false, or the default then)", name, t, c.Type)
		}
	}
	return o, nil
}

// Compare returns -1, 0 or 1 as a sorts before, with or after b.
func (o KeyOrder) Compare(a, b []string) (int, error) {
	if len(a) != len(o.kinds) || len(b) != len(o.kinds) {
		return 0, fmt.Errorf("compare keys of %s: %d and %d values for a %d-column primary key", o.table, len(a), len(b), len(o.kinds))
	}
	for i, k := range o.kinds {
		var c int
		switch k {
		case keyInt:
			x, err := strconv.ParseInt(a[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("compare keys of %s: %s %q: %w", o.table, o.cols[i], a[i], err)
			}
			y, err := strconv.ParseInt(b[i], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("compare keys of %s: %s %q: %w", o.table, o.cols[i], b[i], err)
			}
			c = cmpInt(x, y)
		case keyUUID:
			x, y := uuidHex(a[i]), uuidHex(b[i])
			if x == "" || y == "" {
				return 0, fmt.Errorf("compare keys of %s: %s %q or %q is not a uuid", o.table, o.cols[i], a[i], b[i])
			}
			c = strings.Compare(x, y) // hex digits sort as the bytes they spell
		}
		if c != 0 {
			return c, nil
		}
	}
	return 0, nil
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// Decide is the gate's verdict on a change to the row with primary key key
// (see the comment at the top of this file).
func (p CopyProgress) Decide(o KeyOrder, key []string) (GateDecision, error) {
	switch {
	case !p.Registered:
		return GateSkip, nil
	case p.Done:
		return GateApply, nil
	}
	if p.Copied != nil {
		c, err := o.Compare(key, p.Copied)
		if err != nil {
			return 0, err
		}
		if c <= 0 {
			return GateApply, nil
		}
	}
	if p.ReadingAll {
		return GateHold, nil
	}
	if p.ReadingTo != nil {
		c, err := o.Compare(key, p.ReadingTo)
		if err != nil {
			return 0, err
		}
		if c <= 0 {
			return GateHold, nil
		}
	}
	return GateSkip, nil
}

// ReadCopyProgress reads the copy progress of move's tables on the target,
// by table (schema.table). A table absent from the map is not registered.
func ReadCopyProgress(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, move string) (map[string]CopyProgress, error) {
	rows, err := q.Query(ctx, `SELECT table_name, order_by, done, last_pk, reading_pk, reading_all
		FROM reshard.copy_checkpoint WHERE move = $1`, move)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == pgerr.CodeUndefinedTable || pgErr.Code == pgerr.CodeUndefinedColumn) {
			return map[string]CopyProgress{}, nil // no copy has started on this target
		}
		return nil, fmt.Errorf("read the copy's progress of move %s on the target: %w", move, err)
	}
	out := map[string]CopyProgress{}
	for rows.Next() {
		var (
			table, order string
			p            CopyProgress
		)
		if err := rows.Scan(&table, &order, &p.Done, &p.Copied, &p.ReadingTo, &p.ReadingAll); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the copy's progress of move %s on the target: %w", move, err)
		}
		_, twice := out[table]
		if order != "pk" || twice {
			// A copy that did not run beside its stream (backfill's
			// StreamDuringCopy) pages by token, a unit per range: its
			// positions do not say which keys it has read.
			rows.Close()
			return nil, fmt.Errorf("the copy of move %s pages %s by %s in several units, not beside its stream: the copy gate cannot tell which changes it will read; run the stream after the copy", move, table, order)
		}
		p.Registered = true
		out[table] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the copy's progress of move %s on the target: %w", move, err)
	}
	return out, nil
}

// uuidHex is the 32 lower-case hex digits of a uuid's text, or "".
func uuidHex(s string) string {
	h := strings.ToLower(strings.ReplaceAll(s, "-", ""))
	if len(h) != 32 {
		return ""
	}
	for _, r := range h {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return ""
		}
	}
	return h
}

// copyGate is a runner's side of the gate: the progress it last read and
// whether that read came after the current source transaction was visible
// on the source (only such a read may skip or hold one of its changes; any
// read may apply one, since positions only move forward).
type copyGate struct {
	conn     *pgx.Conn // on the target, apart from the applier's transaction
	orders   map[string]KeyOrder
	prog     map[string]CopyProgress
	fresh    bool
	freshXid uint32
	done     bool // every table's copy is done: the gate lets everything through
}

// GateStats count the changes the copy gate skipped and held (a change
// that held counts once, however long it waited).
type GateStats struct {
	Skipped, Held int64
}

// GateStats reports what the copy gate did so far (zero without CopyGate).
func (s *Stream) GateStats() GateStats {
	return GateStats{Skipped: s.gateSkipped.Load(), Held: s.gateHeld.Load()}
}

// applyBoth is the verdict without a gate (read only).
var applyBoth = [2]GateDecision{GateApply, GateApply}

// gateHoldPoll is how often a held change reads the copy's progress again.
const gateHoldPoll = 20 * time.Millisecond

// gate decides the changes to keys of table p (nil keys are applied),
// holding while any of them holds.
func (r *runner) gate(ctx context.Context, p *tablePlan, keys ...[]string) ([]GateDecision, error) {
	if r.o.CopyGate == "" || (r.cg != nil && r.cg.done) {
		return applyBoth[:len(keys)], nil // no allocation on the applier's hot path
	}
	out := make([]GateDecision, len(keys))
	g := r.cg
	if g == nil {
		g = &copyGate{orders: map[string]KeyOrder{}}
		r.cg = g
	}
	if g.done {
		return out, nil
	}
	table := p.base.String()
	o, ok := g.orders[table]
	if !ok {
		var err error
		if o, err = NewKeyOrder(p.base); err != nil {
			return nil, err
		}
		g.orders[table] = o
	}
	decide := func() (hold, all bool, err error) {
		all = true
		for i, k := range keys {
			out[i] = GateApply
			if k == nil {
				continue
			}
			if out[i], err = g.prog[table].Decide(o, k); err != nil {
				return false, false, err
			}
			hold = hold || out[i] == GateHold
			all = all && out[i] == GateApply
		}
		return hold, all, nil
	}
	if g.prog != nil {
		if _, all, err := decide(); err != nil || all {
			return out, err
		}
	}
	if !g.fresh || g.freshXid != r.xid {
		if err := r.waitVisible(ctx); err != nil {
			return nil, err
		}
		if err := r.readProgress(ctx); err != nil {
			return nil, err
		}
		g.fresh, g.freshXid = true, r.xid
		if g.done {
			return make([]GateDecision, len(keys)), nil
		}
	}
	held := false
	start := time.Now()
	for {
		hold, _, err := decide()
		if err != nil || !hold {
			if err == nil {
				for _, d := range out {
					if d == GateSkip {
						r.s.gateSkipped.Add(1)
					}
				}
			}
			return out, err
		}
		if !held {
			held = true
			r.s.gateHeld.Add(1)
		}
		if w := time.Since(start); w > 30*time.Second {
			start = time.Now()
			r.s.log.Warn("cdc holding a change until the copy commits the chunk it falls in (is the copy running?)", "table", table, "xid", r.xid)
		}
		// A long hold (a copy paused with a chunk marked as being read)
		// still answers the walsender, which would end the stream after
		// wal_sender_timeout without a status.
		if r.repl != nil && !r.peeking && !time.Now().Before(r.nextStatus) {
			if err := r.sendStatus(ctx, false); err != nil {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(gateHoldPoll):
		}
		if err := r.readProgress(ctx); err != nil {
			return nil, err
		}
	}
}

// readProgress reads the copy's progress on the gate's own target session.
func (r *runner) readProgress(ctx context.Context) error {
	g := r.cg
	if g.conn == nil || g.conn.IsClosed() {
		cfg, err := pgsession.ParseConnConfig(r.o.TargetDSN)
		if err != nil {
			return fmt.Errorf("parse target connection string: %w", redactParseError(err))
		}
		if g.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return wrapOp("connect to the target to read the copy's progress", err)
		}
	}
	prog, err := ReadCopyProgress(ctx, g.conn, r.o.CopyGate)
	if err != nil {
		return wrapOp("read the copy's progress", err)
	}
	g.prog = prog
	g.done = len(prog) > 0
	for _, p := range r.s.plans {
		if !prog[p.base.String()].Done {
			g.done = false
		}
	}
	return nil
}

// waitVisible waits until the source transaction being applied is visible
// to new snapshots on the source (visible.go), as fetch does.
func (r *runner) waitVisible(ctx context.Context) error {
	src, err := r.sourceConn(ctx)
	if err != nil {
		return err
	}
	pause := time.Millisecond
	for {
		var snap string
		if err := src.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
			return wrapOp("read a snapshot on the source for the copy gate", err)
		}
		visible, err := visibleIn(snap, r.xid)
		if err != nil || visible {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}
