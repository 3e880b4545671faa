package rollback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cleanup"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// Options configure a rollback.
type Options struct {
	Store *topology.Store
	// Control holds the cutover journals (cutover.PGJournal).
	Control *pgxpool.Pool
	// Old is the pre-migration ring: the owners the ranges go back to.
	Old *ring.Ring
	// BatchRows and RowsPerSec throttle the deletion of the rows on the new
	// owner (defaults 5000 rows per batch, unlimited). Throttle, when set, is
	// used instead of RowsPerSec (an adaptive throttle steers it).
	BatchRows  int
	RowsPerSec float64
	Throttle   *backfill.Throttle
	// VerifyRunIDs are the move's verify runs, whose work rows are dropped.
	VerifyRunIDs []string
	// Budget bounds the reverse cutover's write pause (default 2s).
	Budget      time.Duration
	MigrationID string
	Logger      *slog.Logger
	// CheckReverse, when set, is called by DuringGrace before a reverse
	// cutover begins (none journaled yet): the caller's check that the new
	// owner is the server the reverse slot was created on. Its error (a
	// *cdc.FailedOverError: the slot went with a promotion) is returned
	// with nothing changed, for the caller to recover the reverse slot and
	// call DuringGrace again.
	CheckReverse func(ctx context.Context) error
}

func (o *Options) check(m cutover.Move) error {
	if o.Store == nil || o.Control == nil || o.Old == nil {
		return fmt.Errorf("rollback of move %s: the topology store, the control pool and the pre-migration ring are required", m.ID)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ErrCutOver: BeforeCutover was asked to roll back a move whose ranges the
// new owner already serves; use DuringGrace.
var ErrCutOver = errors.New("the move is cut over: roll it back with DuringGrace")

// ErrNotCutOver: DuringGrace was asked to roll back a move that was never
// cut over; use BeforeCutover.
var ErrNotCutOver = errors.New("the move is not cut over: roll it back with BeforeCutover")

// journalSuffix names the reverse cutover's journal (move id + suffix).
const journalSuffix = "/rollback"

// ReverseJournal names the journal of the reverse cutover of move.
func ReverseJournal(move string) string { return move + journalSuffix }

func giveBack(m cutover.Move, o Options) topology.Handover {
	h := topology.GiveBack(o.Old, m.Ranges, m.From, m.To, "rollback of move "+m.ID)
	h.MigrationID = o.MigrationID
	return h
}

// BeforeCutover rolls back a move that was not cut over. The caller has
// stopped the forward stream. A cutover interrupted by a crash is settled
// first (cutover.Resume: fenced but unpublished → the source is unfenced);
// one that reached its publish is not rolled back here (ErrCutOver).
//
// Then: give the ranges back to the old owner in the topology (clearing
// migrating, the ring back to Old) if a version names the move; drop the
// forward slot and publication on the source and the origin on the target;
// delete the copied rows on the target in throttled batches (it is still
// fenced, so only this deletion writes there); unfence the target; remove the
// fence triggers left with nothing fenced and the TRUNCATE guards on both
// shards; drop the move's work rows. Idempotent.
func BeforeCutover(ctx context.Context, m cutover.Move, o Options) error {
	if err := o.check(m); err != nil {
		return err
	}
	log := o.Logger.With("move", m.ID, "phase", "ROLLBACK")
	// The rollback is the move's newest attempt: a cutover attempt that
	// wakes up after this can neither journal nor publish.
	j, err := cutover.PGJournal{Pool: o.Control, Move: m.ID}.Claim(ctx)
	if err != nil {
		return fmt.Errorf("rollback of move %s: %w", m.ID, err)
	}
	pg := &cutover.PG{Source: m.Source, Target: m.Target, From: m.From, To: m.To, Set: m.Set, Ranges: m.Ranges, Move: m.ID,
		Fences: o.fences(), Epoch: j.Epoch,
		PublishedFunc: func(ctx context.Context) (bool, error) { return cutOver(ctx, o.Store, m) }}
	done, err := cutover.Resume(ctx, pg, j)
	if err != nil {
		return fmt.Errorf("rollback of move %s: settle the cutover: %w", m.ID, err)
	}
	if c, err := cutOver(ctx, o.Store, m); err != nil {
		return fmt.Errorf("rollback of move %s: %w", m.ID, err)
	} else if c {
		return fmt.Errorf("rollback of move %s: %w", m.ID, ErrCutOver)
	}
	if done {
		// Cut over, then given back by DuringGrace: only the cleaning is
		// left, and the target keeps its fences for the ranges it gave back.
		return clean(ctx, m, o, log)
	}
	v, err := giveBack(m, o).Publish(ctx, o.Store)
	if err != nil {
		return fmt.Errorf("rollback of move %s: give the ranges back to %s: %w", m.ID, m.From, err)
	}
	log.Info("ranges stable on the old owner", "ring_version", v, "shard", m.From)
	return clean(ctx, m, o, log)
}

// fences derives fences from the control database.
func (o Options) fences() fence.Control { return fence.Control{Pool: o.Control, Store: o.Store} }

// clean drops the streams, deletes the rows on the new owner, and
// reconciles both shards' fences and guards with the topology: the new
// owner, which does not own the ranges (it never did, or gave them back),
// stays fenced on them; the guards go when no other live move uses a shard.
func clean(ctx context.Context, m cutover.Move, o Options, log *slog.Logger) error {
	if err := cleanup.DropStreams(ctx, m); err != nil {
		return fmt.Errorf("rollback of move %s: %w", m.ID, err)
	}
	n, err := cleanup.DeleteRows(ctx, m.Target, m.Set, m.Ranges, o.BatchRows, o.Throttle, o.RowsPerSec)
	if err != nil {
		return fmt.Errorf("rollback of move %s: delete the rows on %s: %w", m.ID, m.To, err)
	}
	log.Info("rows deleted on the new owner", "shard", m.To, "rows", n)
	// The move has ended: no hold of any of its attempts is left (an
	// attempt that died holding one would keep its shard fenced).
	if err := o.fences().ReleaseAll(ctx, cutover.HoldName(m.ID)); err != nil {
		return fmt.Errorf("rollback of move %s: %w", m.ID, err)
	}
	if err := cleanup.ReconcileBoth(ctx, m, o.fences()); err != nil {
		return fmt.Errorf("rollback of move %s: %w", m.ID, err)
	}
	if err := cleanup.DropWorkRows(ctx, m, o.VerifyRunIDs); err != nil {
		return fmt.Errorf("rollback of move %s: %w", m.ID, err)
	}
	return nil
}

// cutOver reports whether the current topology gives any of the move's
// ranges to its new owner.
func cutOver(ctx context.Context, store *topology.Store, m cutover.Move) (bool, error) {
	cur, err := store.Current(ctx)
	if err != nil {
		return false, fmt.Errorf("read topology: %w", err)
	}
	for _, r := range ring.Normalize(m.Ranges) {
		for _, or := range cur.Ring.AllRanges() {
			if or.Shard == m.To && or.Range.Lo < r.Hi && r.Lo < or.Range.Hi {
				return true, nil
			}
		}
	}
	return false, nil
}

// DuringGrace rolls back a move that is cut over and in GRACE: the caller has
// stopped the GRACE reverse stream (the slot takes one reader); DuringGrace
// runs its own reader of it, built from reverse (cdc.ReverseOptions),
// and cuts over in reverse through cutover.Run with the move's ends swapped:
// fence the new owner → wait out its in-flight transactions → marker on the
// new owner → drain the reverse stream → publish the ranges stable on the old
// owner → unfence the old owner. Over the write-pause budget it aborts (the
// new owner is unfenced and keeps serving) and returns an error wrapping
// cutover.ErrAborted: call it again. After the reverse cutover: drop both
// streams, delete the rows on the new owner (which keeps its fences for the
// ranges it gave back), remove the TRUNCATE guards, drop the work rows.
//
// Idempotent and resumable: the reverse cutover has its own journal
// (move id + "/rollback"); a crash before its publish is undone, after it
// finished forward, and a finished one goes straight to the cleaning.
func DuringGrace(ctx context.Context, m cutover.Move, reverse cdc.Options, o Options) (cutover.Result, error) {
	var res cutover.Result
	if err := o.check(m); err != nil {
		return res, err
	}
	log := o.Logger.With("move", m.ID, "phase", "ROLLBACK")
	if _, err := (cutover.PGJournal{Pool: o.Control, Move: m.ID}).Claim(ctx); err != nil { // no forward attempt acts any more
		return res, fmt.Errorf("rollback of move %s: %w", m.ID, err)
	}
	j, err := cutover.PGJournal{Pool: o.Control, Move: m.ID + journalSuffix}.Claim(ctx)
	if err != nil {
		return res, fmt.Errorf("rollback of move %s: %w", m.ID, err)
	}
	h := giveBack(m, o)
	rm := m.Reversed()
	last, err := j.Last(ctx)
	if err != nil {
		return res, fmt.Errorf("rollback of move %s: read the journal: %w", m.ID, err)
	}
	if last != cutover.StepDone {
		if last == "" {
			if c, err := cutOver(ctx, o.Store, m); err != nil {
				return res, fmt.Errorf("rollback of move %s: %w", m.ID, err)
			} else if !c {
				return res, fmt.Errorf("rollback of move %s: %w", m.ID, ErrNotCutOver)
			}
			if o.CheckReverse != nil {
				if err := o.CheckReverse(ctx); err != nil {
					return res, fmt.Errorf("rollback of move %s: %w", m.ID, err)
				}
			}
		}
		if res, err = reverseCutover(ctx, rm, reverse, o, h, j, log); err != nil {
			return res, fmt.Errorf("rollback of move %s: %w", m.ID, err)
		}
		log.Info("reverse cutover done", "ring_version", res.Version, "write_pause", res.WritePause)
	}
	return res, clean(ctx, m, o, log)
}

// reverseCutover runs the reverse stream while cutover.Run (or Resume after a
// crash) hands the ranges back.
func reverseCutover(ctx context.Context, rm cutover.Move, reverse cdc.Options, o Options, h topology.Handover, j cutover.PGJournal, log *slog.Logger) (cutover.Result, error) {
	var res cutover.Result
	s, err := cdc.New(reverse)
	if err != nil {
		return res, fmt.Errorf("reverse stream: %w", err)
	}
	pg := cutover.NewPG(rm, s, o.fences(), h, j)
	sctx, stop := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(sctx)
	g.Go(func() error {
		err := s.Run(gctx)
		if sctx.Err() != nil {
			return nil // stopped by us
		}
		return fmt.Errorf("reverse stream stopped: %w", err)
	})
	// Catch up before the pause, so that the drain under the fence is short.
	pg.GatesFunc = func(ctx context.Context) error {
		marker := fmt.Sprintf("rollback-gate:%s:%d", rm.ID, time.Now().UnixNano())
		if err := cutover.EmitMarker(ctx, rm.Source, marker); err != nil {
			return fmt.Errorf("emit catch-up marker: %w", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if _, err := s.DrainToMarker(cctx, marker); err != nil {
			return fmt.Errorf("reverse stream catch-up: %w", err)
		}
		return nil
	}
	runErr := func() error {
		done, err := cutover.Resume(gctx, pg, j)
		if err != nil || done {
			return err
		}
		res, err = cutover.Run(gctx, pg, j, cutover.Options{Budget: o.Budget})
		return err
	}()
	stop()
	// The stream's failover is the cause, whatever the attempt then met
	// (its drain cancelled): the caller recovers the reverse slot.
	if werr := g.Wait(); werr != nil && (runErr == nil || errors.Is(werr, cdc.ErrFailedOver)) {
		runErr = werr
	}
	if runErr != nil {
		return res, runErr
	}
	if res.Version == 0 {
		res.Version, _ = func() (int64, error) {
			cur, err := o.Store.Current(ctx)
			return cur.Version, err
		}()
	}
	return res, nil
}
