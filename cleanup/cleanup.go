package cleanup

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/verify"
)

// Options configure Run.
type Options struct {
	// Fences reads the control database: the topology (its Store) and the
	// fence holds, from which both shards' fences and guards are derived.
	Fences fence.Control
	// Target is the plan's target ring (Complete takes the owners from it).
	Target *ring.Ring
	// BatchRows and RowsPerSec throttle the deletion of the moved rows on the
	// old owner (defaults 5000 rows per batch, unlimited). Throttle, when
	// set, is used instead of RowsPerSec (an adaptive throttle steers it).
	BatchRows  int
	RowsPerSec float64
	Throttle   *backfill.Throttle
	// VerifyRunIDs are the verify runs of the move whose work rows are
	// dropped from the target.
	VerifyRunIDs []string
	MigrationID  string
	Logger       *slog.Logger
}

// Result says what Run did.
type Result struct {
	Version int64 // the topology version with the ranges stable on the new owner
	Deleted int64 // rows deleted on the old owner by this call
}

// Run ends a move after GRACE (DESIGN.md §4.8). The caller has stopped
// the reverse stream. In order: publish the ranges stable on the new owner
// (from then on nothing reads the old owner's copy, not even a router's read
// fallback), drop both streams' slots, publications and origins, delete the
// moved rows on the old owner in throttled batches (under the replica role:
// the old owner keeps its fences for the ranges it gave away), drop the work
// rows (copy checkpoints, verify runs), reconcile both shards' fences and
// TRUNCATE guards with the topology (fence.Reconcile: the guards go when no
// other live move uses the shard; the old owner stays fenced where it owns
// nothing). Every step is idempotent: after a crash, call it again.
func Run(ctx context.Context, m cutover.Move, o Options) (Result, error) {
	var res Result
	if err := m.Check(); err != nil {
		return res, err
	}
	if o.Fences.Store == nil || o.Fences.Pool == nil || o.Target == nil {
		return res, fmt.Errorf("cleanup of move %s: the topology store and the target ring are required", m.ID)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("move", m.ID, "phase", "CLEANUP")
	cur, err := o.Fences.Store.Current(ctx)
	if err != nil {
		return res, fmt.Errorf("cleanup of move %s: %w", m.ID, err)
	}
	if !topology.Owns(cur.Ring, m.To, m.Ranges) {
		return res, fmt.Errorf("cleanup of move %s: topology version %d does not give its ranges to %s: the move is not cut over (roll it back instead)", m.ID, cur.Version, m.To)
	}
	// The cleanup is the move's newest attempt: an older cutover attempt
	// that wakes up publishes nothing after it.
	if _, err := (cutover.PGJournal{Pool: o.Fences.Pool, Move: m.ID}).Claim(ctx); err != nil {
		return res, fmt.Errorf("cleanup of move %s: %w", m.ID, err)
	}
	h := topology.Complete(o.Target, m.Ranges, m.From, m.To, "cleanup of move "+m.ID)
	h.MigrationID = o.MigrationID
	if res.Version, err = h.Publish(ctx, o.Fences.Store); err != nil {
		return res, fmt.Errorf("cleanup of move %s: publish the ranges stable on %s: %w", m.ID, m.To, err)
	}
	log.Info("ranges stable on the new owner", "ring_version", res.Version, "shard", m.To)
	if err := DropStreams(ctx, m); err != nil {
		return res, fmt.Errorf("cleanup of move %s: %w", m.ID, err)
	}
	if res.Deleted, err = DeleteRows(ctx, m.Source, m.Set, m.Ranges, o.BatchRows, o.Throttle, o.RowsPerSec); err != nil {
		return res, fmt.Errorf("cleanup of move %s: delete the moved rows on %s: %w", m.ID, m.From, err)
	}
	log.Info("moved rows deleted on the old owner", "shard", m.From, "rows", res.Deleted)
	if err := DropWorkRows(ctx, m, o.VerifyRunIDs); err != nil {
		return res, fmt.Errorf("cleanup of move %s: %w", m.ID, err)
	}
	// The move has ended: no hold of any of its attempts is left.
	if err := o.Fences.ReleaseAll(ctx, cutover.HoldName(m.ID)); err != nil {
		return res, fmt.Errorf("cleanup of move %s: %w", m.ID, err)
	}
	if err := ReconcileBoth(ctx, m, o.Fences); err != nil {
		return res, fmt.Errorf("cleanup of move %s: %w", m.ID, err)
	}
	return res, nil
}

// DeleteRows deletes the rows of set in ranges on one shard, batch rows per
// transaction under the replica role (fences let it through): through th
// when it is set (an adaptive throttle steers it), else at most rowsPerSec
// (0: unlimited).
func DeleteRows(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, ranges []ring.Range, batch int, th *backfill.Throttle, rowsPerSec float64) (int64, error) {
	if th == nil && rowsPerSec > 0 {
		th = backfill.NewThrottle(rowsPerSec, 0)
	}
	return backfill.DeleteRanges(ctx, pool, set, ranges, batch, th)
}

// DropStreams drops both streams of a move, whichever exist: the forward
// stream's (DropForward) and the reverse stream's, the reverse slot and
// publication on the new owner and the reverse origin on the old one. The
// streams must be stopped (cdc.DropSlot waits 10 s for one that is shutting
// down). Only m's ID, shard names and pools are read.
func DropStreams(ctx context.Context, m cutover.Move) error {
	if err := DropForward(ctx, m); err != nil {
		return err
	}
	rev, err := cdc.ReverseNamesFor(m.ID)
	if err != nil {
		return err
	}
	return drop(ctx, rev, m.Reversed())
}

// DropForward drops the forward stream of a move: its slot and publication
// on the old owner and its origin on the new one. After the cutover the
// stream is stopped and the slot would only pin WAL.
func DropForward(ctx context.Context, m cutover.Move) error {
	fwd, err := cdc.NamesFor(m.ID)
	if err != nil {
		return err
	}
	return drop(ctx, fwd, m)
}

// drop drops one stream's objects: names' slot and publication on m's
// source, its origin on m's target.
func drop(ctx context.Context, names cdc.Names, m cutover.Move) error {
	if err := cdc.DropSlot(ctx, m.Source, names.Slot); err != nil {
		return fmt.Errorf("on %s: %w", m.From, err)
	}
	if err := cdc.DropPublication(ctx, m.Source, names.Publication); err != nil {
		return fmt.Errorf("on %s: %w", m.From, err)
	}
	if err := cdc.DropOrigin(ctx, m.Target, names.Origin); err != nil {
		return fmt.Errorf("on %s: %w", m.To, err)
	}
	return nil
}

// DropWorkRows forgets the move's copy checkpoints and the given verify runs
// on the new owner, where backfill and verify keep them.
func DropWorkRows(ctx context.Context, m cutover.Move, verifyRunIDs []string) error {
	if err := backfill.DropCheckpoints(ctx, m.Target, m.ID); err != nil {
		return err
	}
	if err := verify.DropRuns(ctx, m.Target, verifyRunIDs); err != nil {
		return fmt.Errorf("move %s: %w", m.ID, err)
	}
	return nil
}

// ReconcileBoth reconciles the fences and TRUNCATE guards of both shards of
// a move with the control database (fence.Reconcile).
func ReconcileBoth(ctx context.Context, m cutover.Move, fences fence.Control) error {
	for _, sh := range []struct {
		name string
		pool *pgxpool.Pool
	}{{m.From, m.Source}, {m.To, m.Target}} {
		if _, err := fence.Reconcile(ctx, sh.pool, sh.name, m.Set, fences); err != nil {
			return err
		}
	}
	return nil
}
