package backfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
)

// SlotReading is one look at a move's slot on the source.
type SlotReading struct {
	// Status is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost.
	Status string
	// Retained is the WAL the slot holds (current position − restart_lsn).
	Retained int64
	// Budget is what it may hold: the lower of the server's (Retained +
	// safe_wal_size, with max_slot_wal_keep_size set) and the configured
	// one; 0 when neither is set.
	Budget int64
}

// Ratio is Retained/Budget (0 without a budget).
func (r SlotReading) Ratio() float64 {
	if r.Budget <= 0 {
		return 0
	}
	return float64(r.Retained) / float64(r.Budget)
}

// budgetOf combines the server's headroom with a configured budget.
func budgetOf(retained int64, safeWALSize *int64, configured int64) int64 {
	var b int64
	if safeWALSize != nil {
		b = retained + *safeWALSize
	}
	if configured > 0 && (b <= 0 || configured < b) {
		b = configured
	}
	return b
}

// ReadSlot reads a slot's wal_status, retained WAL and budget (configured:
// the operator's WAL budget for it, 0 none).
func ReadSlot(ctx context.Context, source *pgxpool.Pool, slot string, configured int64) (SlotReading, error) {
	var (
		r    SlotReading
		safe *int64
	)
	err := source.QueryRow(ctx, `SELECT coalesce(wal_status, ''), coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&r.Status, &r.Retained, &safe)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("slot %s does not exist", slot)
	}
	if err != nil {
		return r, fmt.Errorf("read slot %s: %w", slot, err)
	}
	r.Budget = budgetOf(r.Retained, safe, configured)
	return r, nil
}

// The guard's marks: over GuardCutAt of its budget (or wal_status
// unreserved) a slot cuts the copy; from GuardHoldAt (or wal_status
// extended) it holds the copy's rate where it is.
const (
	GuardCutAt  = 0.8
	GuardHoldAt = 0.64
)

// SlotGuard slows a copy whose slot nears its WAL budget. During the copy
// the slot retains every byte of WAL the source writes (its stream starts
// after the copy), so a slower copy does not shrink the slot: the guard is a
// brake that spares the source's I/O and buys the operator time (the
// ReshardSlotWALNearBudget alert), not a way back under the budget. A slot
// that is lost ends the copy with a *cdc.FailedOverError (SlotLost): the
// failover path, never a silent skip.
type SlotGuard struct {
	Throttle *Throttle
	Source   *pgxpool.Pool
	Slot     string
	// Shard is the source's name (metrics, messages); Move the move's id.
	Shard, Move string
	// Budget is the configured WAL budget of the source (0: the server's
	// alone).
	Budget int64
	// Interval between readings (default 2s). Each reading over the cut
	// mark halves the copy's rate, down to DefaultMinRate.
	Interval time.Duration
	// Start is the guard rate an earlier slice of the copy left (0: none):
	// a copy runs in slices, and a brake let go at each slice's start would
	// spend every slice coming back down.
	Start   float64
	Logger  *slog.Logger
	Metrics *Metrics

	rate atomic.Uint64 // math.Float64bits of the guard rate in force
}

// Rate is the guard's rows/s in force (0: none).
func (g *SlotGuard) Rate() float64 {
	if g == nil {
		return 0
	}
	return math.Float64frombits(g.rate.Load())
}

// step is the guard's law: the next guard rate from a reading, the rate
// the copy achieved since the last one and the guard rate in force (0:
// none). Pure.
func guardStep(r SlotReading, achieved, cur float64) (next float64, why string) {
	ratio := r.Ratio()
	switch {
	case r.Status == "unreserved" || ratio > GuardCutAt:
		base := cur
		if base <= 0 || (achieved > 0 && achieved < base) {
			base = achieved
		}
		if base <= 0 {
			base = 2 * DefaultMinRate
		}
		why = fmt.Sprintf("slot WAL %s is %.0f%% of its budget %s", humanBytes(r.Retained), 100*ratio, humanBytes(r.Budget))
		if r.Status == "unreserved" {
			why = "slot wal_status unreserved: its WAL is past max_slot_wal_keep_size and may be removed at the next checkpoint"
		}
		return max(base/2, DefaultMinRate), why
	case r.Status == "extended" || ratio >= GuardHoldAt:
		if cur <= 0 {
			return 0, "" // nothing to hold: the copy runs at its own rate
		}
		return cur, "holding"
	case cur <= 0:
		return 0, ""
	}
	// Below the marks: lift the brake, half again each step, then let go.
	if next = cur * 1.5; achieved > 0 && next > 4*achieved {
		return 0, ""
	}
	return next, ""
}

// Run watches the slot every Interval until ctx ends (nil) or the slot is
// lost (*cdc.FailedOverError).
func (g *SlotGuard) Run(ctx context.Context) error {
	interval := g.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last, lastAt := g.Throttle.passed.Load(), time.Now()
	cur := g.Start
	g.Throttle.SetGuard(cur)
	g.rate.Store(math.Float64bits(cur))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		r, err := ReadSlot(ctx, g.Source, g.Slot, g.Budget)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			log.Warn("slot guard: cannot read the slot; the copy's rate stays", "slot", g.Slot, "error", err)
			continue
		}
		if r.Status == "lost" {
			return &cdc.FailedOverError{Source: g.Shard, Slot: g.Slot, SlotLost: true}
		}
		g.Metrics.slotBudget(g.Move, g.Shard, r)
		now := time.Now()
		passed := g.Throttle.passed.Load()
		achieved := float64(passed-last) / now.Sub(lastAt).Seconds()
		last, lastAt = passed, now
		next, why := guardStep(r, achieved, cur)
		if next != cur {
			g.Throttle.SetGuard(next)
			switch {
			case next == 0:
				log.Info("slot guard lets the copy go", "slot", g.Slot, "wal", r.Retained, "budget", r.Budget)
			case cur == 0 || next < cur:
				log.Warn("slot guard slows the copy", "slot", g.Slot, "rows_per_sec", int64(next), "reason", why)
			}
			cur = next
			g.rate.Store(math.Float64bits(cur))
		}
	}
}

// With runs work while the guard watches; a lost slot cancels the work
// and is returned. A nil g runs work alone.
func (g *SlotGuard) With(ctx context.Context, work func(ctx context.Context) error) error {
	if g == nil {
		return work(ctx)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	gctx, stop := context.WithCancel(ctx)
	go func() {
		err := g.Run(gctx)
		if err != nil {
			cancel(err)
		}
		done <- err
	}()
	err := work(wctx)
	stop()
	if gerr := <-done; gerr != nil {
		return gerr
	}
	if err == nil { // the copy is done: its slot is the stream's business now
		g.Metrics.slotGuardEnded(g.Move)
	}
	return err
}
