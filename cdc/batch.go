package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// The applier's batches: changes applied into one target transaction,
// committed with the replication origin's progress, acknowledged to the
// source only once committed.

// batchDelay is how long the open batch may stay open.
func (r *runner) batchDelay() time.Duration {
	if r.behind.Load() {
		return r.o.CatchUpBatchDelay
	}
	return r.o.BatchDelay
}

// MarkerPrefix is the prefix of reshard's pg_logical_emit_message markers.
const MarkerPrefix = "reshard"

// apply routes one row change (DESIGN.md §4.4).
func (r *runner) apply(ctx context.Context, c *Change) error {
	b := r.binds[c.Rel.ID]
	if b == nil || b.rel != c.Rel {
		return fmt.Errorf("change of %s without a checked Relation message", c.Rel)
	}
	p := b.plan
	ranges := r.o.Ranges
	newRow, oldRow := b.row(c.New, 'N'), b.row(c.Old, c.OldKind)
	newIn, newKnown, err := p.inRanges(newRow, ranges)
	if err != nil {
		return err
	}
	oldIn, oldKnown, err := p.inRanges(oldRow, ranges)
	if err != nil {
		return err
	}
	switch c.Kind {
	case Update:
		if !newKnown && oldKnown { // key unchanged and TOASTed: the old tuple has it
			newIn, newKnown = oldIn, true
		}
		if c.Old == nil && p.t.KeyInIdentity() { // identity unchanged: so is the key
			oldIn, oldKnown = newIn, newKnown
		}
	case Delete:
	case Insert:
	}
	if c.Kind != Delete && !newKnown {
		return fmt.Errorf("%s of %s: shard key %s not sent, cannot route the change", c.Kind, p.t, p.t.KeyColumn)
	}
	newPK, _ := p.pkOf(newRow)
	oldPK, ok := p.pkOf(oldRow)
	if !ok {
		oldPK = newPK
	}
	if c.Kind == Delete && oldPK == nil {
		return fmt.Errorf("delete of %s: primary key not sent (replica identity must contain it)", p.t)
	}
	switch {
	case c.Kind != Delete && newIn:
		if newPK == nil {
			return fmt.Errorf("%s of %s: primary key not sent", c.Kind, p.t)
		}
		r.counted(c.Kind)
		samePK := pkMapKey(oldPK) == pkMapKey(newPK)
		r.s.witness.touched(p.t.String(), newPK, r.commit)
		if !samePK {
			r.s.witness.touched(p.t.String(), oldPK, r.commit)
		}
		// A copy running beside the stream: the new key's write and the
		// old key's delete, each by where its key stands (copygate.go).
		gateOld := []string(nil)
		if !samePK {
			gateOld = oldPK
		}
		d, err := r.gate(ctx, p, newPK, gateOld)
		if err != nil {
			return err
		}
		if d[0] == GateSkip {
			if !samePK && d[1] == GateApply {
				r.tg.add(p, &pendingOp{pk: oldPK})
			}
			return nil
		}
		fetched := false
		if hasUnchanged(newRow) {
			// Unchanged TOAST values carried over from the key's image
			// pending in this batch (across a key change only an image the
			// stream sent: pendingOp.fetched); those it lacks too stay as
			// the target has them: only the sent columns are set.
			if prev, pf := r.tg.pendingRow(p, oldPK); prev != nil && (samePK || !pf) {
				newRow, fetched = fillUnchanged(newRow, prev), pf
			}
			if hasUnchanged(newRow) {
				if !samePK || c.Kind != Update {
					return r.tg.partial(ctx, p, oldPK, newRow) // rare: written at once
				}
				r.tg.add(p, &pendingOp{pk: newPK, row: newRow, partial: true})
				return nil
			}
		}
		if !samePK {
			r.tg.add(p, &pendingOp{pk: oldPK})
		}
		r.tg.add(p, &pendingOp{pk: newPK, row: newRow, upsert: true, update: c.Kind == Update && samePK && (oldIn || !oldKnown), fetched: fetched})
	case oldKnown && !oldIn && c.Kind != Insert:
		r.s.mFiltered.Inc() // never was in the ranges
	case c.Kind == Insert:
		r.s.mFiltered.Inc()
	default:
		// A delete, or a key that left the ranges: delete the target row if it
		// is one of ours (the predicate is on the target row's own key, which
		// also covers messages without the key).
		r.counted(c.Kind)
		r.s.witness.touched(p.t.String(), oldPK, r.commit)
		d, err := r.gate(ctx, p, oldPK)
		if err != nil {
			return err
		}
		if d[0] == GateSkip {
			return nil // the copy has not read the row, and will not
		}
		r.tg.add(p, &pendingOp{pk: oldPK})
	}
	return nil
}

func (r *runner) counted(k ChangeKind) {
	r.s.mChanges[k].Inc()
}

// commitBatch writes what is pending and commits the target transaction with
// the last source transaction's end LSN recorded in the replication origin;
// only then does the applied position move.
func (r *runner) commitBatch(ctx context.Context) error {
	if r.batchTxns == 0 {
		return nil
	}
	if err := r.tg.sync(ctx); err != nil {
		return err
	}
	if r.tg.tx != nil {
		if _, err := r.tg.tx.Exec(ctx, `SELECT pg_replication_origin_xact_setup($1, $2)`, r.lastEnd.String(), r.lastCommitTime); err != nil {
			return wrapOp("record applied position in replication origin "+r.o.Origin, err)
		}
		err := r.tg.tx.Commit(ctx)
		r.tg.tx = nil
		clear(r.tg.staged)
		if err != nil {
			return wrapOp("commit target transaction", err)
		}
		r.tg.written = 0
		r.s.mBatches.Inc()
	}
	r.s.mu.Lock()
	if r.lastEnd > r.s.applied {
		r.s.applied = r.lastEnd
	}
	for _, p := range r.txnMarkers {
		r.s.markers[p] = r.lastEnd
	}
	r.s.notify()
	r.s.mu.Unlock()
	r.txnMarkers = r.txnMarkers[:0]
	r.batchTxns = 0
	r.committedEnd, r.committedCommit = r.lastEnd, r.lastCommit
	r.mLag(r.lastCommitTime)
	return nil
}

func (r *runner) mLag(lastCommit time.Time) {
	received, applied, acked := r.s.Positions()
	r.s.mPos[0].Set(float64(received))
	r.s.mPos[1].Set(float64(applied))
	r.s.mPos[2].Set(float64(acked))
	lag := int64(0)
	if r.serverEnd > applied {
		lag = int64(r.serverEnd - applied)
	}
	r.s.mLagBytes.Set(float64(lag))
	r.s.lagBytes.Store(lag)
	if lastCommit.IsZero() || applied >= r.serverEnd {
		r.s.mLagSecs.Set(0)
	} else {
		r.s.mLagSecs.Set(time.Since(lastCommit).Seconds())
	}
}

// sendStatus acknowledges the applied position: only what is committed on
// the target is ever reported as flushed.
func (r *runner) sendStatus(ctx context.Context, reply bool) error {
	r.s.mu.Lock()
	applied := r.s.applied
	r.s.mu.Unlock()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, r.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: applied, WALFlushPosition: applied, WALApplyPosition: applied, ClientTime: time.Now()})
	if err != nil {
		return wrapOp("acknowledge "+applied.String()+" to slot "+r.o.Slot, err)
	}
	r.s.mu.Lock()
	r.s.acked = applied
	r.s.mu.Unlock()
	r.nextStatus = time.Now().Add(r.o.StatusInterval)
	if time.Since(r.lastSlot) > 15*time.Second {
		r.lastSlot = time.Now()
		if src, err := r.sourceConn(ctx); err == nil {
			if st, err := SlotStats(ctx, src, r.o.Slot); err == nil {
				r.s.mRetained.Set(float64(st.RetainedBytes))
			}
		}
	}
	r.mLag(time.Time{})
	return nil
}
