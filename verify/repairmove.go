package verify

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/tableset"
)

// Move names a move to repair: its id and its two shards, as errors name
// them.
type Move struct {
	ID, Source, Target string
}

// StreamReadsError: a stream reads the move's slot on the source, so it
// writes the target, or GRACE's reverse stream reads the reverse slot on
// the target (Reverse), so the move cut over: the target may not be
// repaired now.
type StreamReadsError struct {
	Move    Move
	Slot    string
	PID     int32
	Reverse bool
}

func (e *StreamReadsError) Error() string {
	if e.Reverse {
		return fmt.Sprintf("move %s: a reverse stream reads slot %s on %s (walsender pid %d): the move cut over, its target is the owner and is not repaired",
			e.Move.ID, e.Slot, e.Move.Target, e.PID)
	}
	return fmt.Sprintf("move %s: a stream reads slot %s on %s (walsender pid %d) and writes the target: wait until reshard status shows the move stopped",
		e.Move.ID, e.Slot, e.Move.Source, e.PID)
}

// BadMoveIDError: the move id names no slot (bad input).
type BadMoveIDError struct{ Err error }

func (e *BadMoveIDError) Error() string { return e.Err.Error() }
func (e *BadMoveIDError) Unwrap() error { return e.Err }

// RepairMove is `reshard verify --repair` on one move: Repair of m's target
// from its source in opts.Ranges, with spec's tables introspected on both
// sides (opts.Set is the source's). It refuses with a *StreamReadsError,
// writing nothing, while a stream reads the move's slot on the source: the
// caller's view of the move may be a moment old, the slot says whether a
// stream writes the target now.
//
// Before it writes, it drops the move's reverse slot on the target, if an
// aborted cutover attempt made one: the repair's writes carry no replication
// origin, so GRACE's reverse stream from that slot would write the repair's
// rows, the source's values of now, back over newer ones on the source. The
// next attempt makes the slot again, after the repair. The caller must know
// the move has not cut over (the topology does not give the ranges to the
// target): from then on the slot holds the target's writes the source needs.
// A reverse stream reading the slot (GRACE) is refused, nothing dropped.
func RepairMove(ctx context.Context, src, dst *pgxpool.Pool, m Move, spec tableset.Spec, opts Options) (*RepairReport, error) {
	names, err := cdc.NamesFor(m.ID)
	if err != nil {
		return nil, &BadMoveIDError{fmt.Errorf("move id %s: %w", m.ID, err)}
	}
	pid, _, err := cdc.SlotReader(ctx, src, names.Slot)
	if err != nil {
		return nil, fmt.Errorf("move %s on %s: %w", m.ID, m.Source, err)
	}
	if pid != 0 {
		return nil, &StreamReadsError{Move: m, Slot: names.Slot, PID: pid}
	}
	set, err := tableset.Introspect(ctx, src, spec, "source "+m.Source)
	if err != nil {
		return nil, err
	}
	if _, err := tableset.Introspect(ctx, dst, spec, "target "+m.Target); err != nil {
		return nil, err
	}
	rev, err := cdc.ReverseNamesFor(m.ID)
	if err != nil {
		return nil, &BadMoveIDError{fmt.Errorf("move id %s: %w", m.ID, err)}
	}
	pid, exists, err := cdc.SlotReader(ctx, dst, rev.Slot)
	if err != nil {
		return nil, fmt.Errorf("move %s on %s: %w", m.ID, m.Target, err)
	}
	if pid != 0 {
		return nil, &StreamReadsError{Move: m, Slot: rev.Slot, PID: pid, Reverse: true}
	}
	if exists {
		if err := cdc.DropSlot(ctx, dst, rev.Slot); err != nil {
			return nil, fmt.Errorf("move %s: drop the reverse slot on %s before the repair: %w", m.ID, m.Target, err)
		}
		if opts.Logger != nil {
			opts.Logger.Info("dropped the reverse slot an earlier cutover attempt made: the next attempt makes it again, after the repair", "move", m.ID, "shard", m.Target, "slot", rev.Slot)
		}
	}
	opts.Set = set
	rep, err := Repair(ctx, src, dst, opts)
	if err != nil {
		return nil, fmt.Errorf("repair move %s (%s → %s): %w", m.ID, m.Source, m.Target, err)
	}
	return rep, nil
}
