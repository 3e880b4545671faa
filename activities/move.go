package activities

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// sides resolves a move's two shards and reads the table set from both.
type sides struct {
	src, dst       *pgxpool.Pool
	srcSet, dstSet tableset.Set
}

func (a *Activities) sides(ctx context.Context, m workflows.MoveRef) (sides, error) {
	var s sides
	var err error
	if s.src, err = a.pools.shard(ctx, m.Spec.Source); err != nil {
		return s, err
	}
	if s.dst, err = a.pools.shard(ctx, m.Spec.Target); err != nil {
		return s, err
	}
	if s.srcSet, err = tableset.Introspect(ctx, s.src, m.Tables, "source "+m.Spec.Source); err != nil {
		return s, fmt.Errorf("move %s: %w", m.Spec.ID, err)
	}
	if s.dstSet, err = tableset.Introspect(ctx, s.dst, m.Tables, "target "+m.Spec.Target); err != nil {
		return s, fmt.Errorf("move %s: %w", m.Spec.ID, err)
	}
	return s, nil
}

// Join is the JOINING phase: fence triggers and TRUNCATE guards on both
// shards, the moving ranges fenced on the target (only the applier writes
// there), the copy's checkpoint schema, then publication and slot on the
// source. It returns the slot's consistent point L0. Idempotent: an existing
// slot is kept and its confirmed position returned.
func (a *Activities) Join(ctx context.Context, m workflows.MoveRef) (workflows.JoinResult, error) {
	r, err := a.join(ctx, m)
	return r, classify(err)
}

func (a *Activities) join(ctx context.Context, m workflows.MoveRef) (workflows.JoinResult, error) {
	s, err := a.sides(ctx, m)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	names, err := cdc.NamesFor(m.Spec.ID)
	if err != nil {
		return workflows.JoinResult{}, badInput("move id: %v", err)
	}
	epoch, err := a.epoch(ctx)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	if err := cutover.InstallTriggers(ctx, s.dst, s.dstSet, true); err != nil {
		return workflows.JoinResult{}, fmt.Errorf("target %s: %w", m.Spec.Target, err)
	}
	if err := cutover.Fence(ctx, s.dst, s.dstSet, m.Spec.Ranges, epoch); err != nil {
		return workflows.JoinResult{}, fmt.Errorf("target %s: %w", m.Spec.Target, err)
	}
	if err := cutover.InstallTriggers(ctx, s.src, s.srcSet, true); err != nil {
		return workflows.JoinResult{}, fmt.Errorf("source %s: %w", m.Spec.Source, err)
	}
	if err := backfill.EnsureSchema(ctx, s.dst); err != nil {
		return workflows.JoinResult{}, fmt.Errorf("target %s: %w", m.Spec.Target, err)
	}
	if err := cdc.CreatePublication(ctx, s.src, names.Publication, s.srcSet, m.Spec.Ranges); err != nil {
		return workflows.JoinResult{}, fmt.Errorf("source %s: %w", m.Spec.Source, err)
	}
	l0, err := a.createSlot(ctx, m.Spec.Source, names.Slot)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	return workflows.JoinResult{L0: l0.String()}, nil
}

func (a *Activities) createSlot(ctx context.Context, shard, slot string) (pglogrepl.LSN, error) {
	dsn, err := a.pools.r.replicationDSN(shard)
	if err != nil {
		return 0, err
	}
	heartbeat(ctx, "creating slot "+slot+" (waits for running write transactions)")
	stop := keepBeating(ctx, 5*time.Second, func() any { return "creating slot " + slot })
	defer stop()
	rc, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return 0, &cdc.ConnError{Op: "replication connection to " + shard, Err: errors.New("cannot connect")}
	}
	defer rc.Close(context.WithoutCancel(ctx))
	l0, _, err := cdc.CreateSlot(ctx, rc, slot)
	if err != nil {
		return 0, fmt.Errorf("create slot %s on %s: %w", slot, shard, err)
	}
	return l0, nil
}

func (a *Activities) epoch(ctx context.Context) (int64, error) {
	store, err := a.store(ctx)
	if err != nil {
		return 0, err
	}
	cur, err := store.Current(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the current topology: %w", err)
	}
	return cur.Version, nil
}

// CopySlice copies for at most MaxTime, then returns the copy's position:
// the workflow loops over slices so that pause, throttle and progress are
// its own business. The durable position is the checkpoints in the target,
// committed with every chunk, so a slice ending anywhere loses nothing.
func (a *Activities) CopySlice(ctx context.Context, in workflows.CopySliceInput) (workflows.CopyProgress, error) {
	p, err := a.copySlice(ctx, in)
	return p, classify(err)
}

func (a *Activities) copySlice(ctx context.Context, in workflows.CopySliceInput) (workflows.CopyProgress, error) {
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.CopyProgress{}, err
	}
	if in.MaxTime <= 0 {
		in.MaxTime = 20 * time.Second
	}
	sctx, cancel := context.WithTimeout(ctx, in.MaxTime)
	defer cancel()
	var rows, bytes atomic.Int64
	stop := keepBeating(ctx, 5*time.Second, func() any {
		return map[string]int64{"slice_rows": rows.Load(), "slice_bytes": bytes.Load()}
	})
	stats, err := backfill.Copy(sctx, s.src, s.dst, backfill.Options{
		Move: in.Move.Spec.ID, Set: s.srcSet, Ranges: in.Move.Spec.Ranges, ChunkRows: in.ChunkRows,
		RowsPerSec: in.Throttle.RowsPerSec, BytesPerSec: in.Throttle.BytesPerSec,
		Progress: func(p backfill.Progress) { rows.Store(p.Rows); bytes.Store(p.Bytes) },
		Logger:   a.log.With("move", in.Move.Spec.ID), Metrics: a.metrics.Backfill,
	})
	stop()
	done := err == nil
	if err != nil && (sctx.Err() == nil || ctx.Err() != nil) {
		return workflows.CopyProgress{}, fmt.Errorf("copy move %s: %w", in.Move.Spec.ID, err)
	}
	cps, err := backfill.Checkpoints(ctx, s.dst, in.Move.Spec.ID)
	if err != nil {
		return workflows.CopyProgress{}, fmt.Errorf("read checkpoints of move %s: %w", in.Move.Spec.ID, err)
	}
	p := workflows.CopyProgress{Bytes: stats.Bytes, Done: done, Units: stats.Units}
	finished := 0
	for _, c := range cps {
		p.Rows += c.Rows
		if c.Done {
			finished++
		}
	}
	p.Left = max(stats.Units-finished, 0)
	a.progressGauges(in, p, stats.Elapsed)
	return p, nil
}

func (a *Activities) progressGauges(in workflows.CopySliceInput, p workflows.CopyProgress, elapsed time.Duration) {
	est := in.Move.Spec.EstBytes
	rowsLeft := max(in.Move.Spec.EstRows-p.Rows, 0)
	if p.Done {
		rowsLeft = 0
	}
	var bytesLeft float64
	if in.Move.Spec.EstRows > 0 {
		bytesLeft = float64(est) * float64(rowsLeft) / float64(in.Move.Spec.EstRows)
	}
	labels := []string{in.Move.MigrationID, in.Move.Spec.ID}
	a.metrics.bytesRemaining.WithLabelValues(labels...).Set(bytesLeft)
	eta := 0.0
	if p.Bytes > 0 && elapsed > 0 {
		eta = bytesLeft / (float64(p.Bytes) / elapsed.Seconds())
	}
	a.metrics.eta.WithLabelValues(labels...).Set(eta)
}

// RunCDC runs a move's stream until cancelled: forward (source → target,
// registered in this process for verify and cutover, which run in the same
// session) or reverse (GRACE: target → source, skipping the forward
// applier's own transactions). It resumes from the replication origin on
// the side it applies to.
func (a *Activities) RunCDC(ctx context.Context, in workflows.CDCInput) error {
	return classify(a.runCDC(ctx, in))
}

// RunReverse is RunCDC of the GRACE reverse stream (a separate activity so
// that it runs on any worker, outside the forward stream's session).
func (a *Activities) RunReverse(ctx context.Context, in workflows.CDCInput) error {
	in.Reverse = true
	return classify(a.runCDC(ctx, in))
}

func (a *Activities) runCDC(ctx context.Context, in workflows.CDCInput) error {
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return err
	}
	from, to, set := in.Move.Spec.Source, in.Move.Spec.Target, s.dstSet
	names, err := cdc.NamesFor(in.Move.Spec.ID)
	if in.Reverse {
		from, to, set = to, from, s.srcSet
		names, err = cdc.ReverseNamesFor(in.Move.Spec.ID)
	}
	if err != nil {
		return badInput("move id: %v", err)
	}
	l0, err := pglogrepl.ParseLSN(in.L0)
	if err != nil {
		return badInput("L0 %q: %v", in.L0, err)
	}
	repl, err := a.pools.r.replicationDSN(from)
	if err != nil {
		return err
	}
	plain, err := a.pools.r.dsn(from)
	if err != nil {
		return err
	}
	target, err := a.pools.r.dsn(to)
	if err != nil {
		return err
	}
	st, err := cdc.New(cdc.Options{
		Move: in.Move.Spec.ID, SourceReplicationDSN: repl, SourceDSN: plain, Slot: names.Slot, Publication: names.Publication,
		StartLSN: l0, TargetDSN: target, Set: set, Ranges: in.Move.Spec.Ranges, Origin: names.Origin, SkipOrigin: in.Reverse,
		Logger: a.log.With("move", in.Move.Spec.ID, "reverse", in.Reverse), Metrics: a.metrics.CDC,
	})
	if err != nil {
		return badInput("stream of move %s: %v", in.Move.Spec.ID, err)
	}
	if !in.Reverse {
		a.putStream(in.Move.Spec.ID, st)
		defer a.dropStream(in.Move.Spec.ID, st)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return st.Run(gctx) })
	stop := keepBeating(gctx, 5*time.Second, func() any {
		rcv, app, ack := st.Positions()
		return map[string]string{"received": rcv.String(), "applied": app.String(), "acked": ack.String()}
	})
	err = g.Wait()
	stop()
	if ctx.Err() != nil {
		return ctx.Err() // cancelled by the workflow: the phase it served is over
	}
	if err == nil {
		return errors.New("the stream ended by itself")
	}
	return fmt.Errorf("stream of move %s: %w", in.Move.Spec.ID, err)
}

// CDCStatus reports the forward stream's lag: the source's current WAL
// position minus what the applier has committed.
func (a *Activities) CDCStatus(ctx context.Context, m workflows.MoveRef) (workflows.CDCStatus, error) {
	st, err := a.stream(ctx, m.Spec.ID)
	if err != nil {
		return workflows.CDCStatus{}, classify(err)
	}
	src, err := a.pools.shard(ctx, m.Spec.Source)
	if err != nil {
		return workflows.CDCStatus{}, classify(err)
	}
	var cur string
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&cur); err != nil {
		return workflows.CDCStatus{}, classify(fmt.Errorf("read WAL position of %s: %w", m.Spec.Source, err))
	}
	end, err := pglogrepl.ParseLSN(cur)
	if err != nil {
		return workflows.CDCStatus{}, classify(err)
	}
	rcv, app, _ := st.Positions()
	lag := int64(0)
	if end > app {
		lag = int64(end - app)
	}
	return workflows.CDCStatus{Received: rcv.String(), Applied: app.String(), LagBytes: lag}, nil
}

// Verify compares source and target at one LSN, holding the session's
// stream there. A mismatch is a non-retryable error of type
// ErrTypeVerification carrying the VerifySummary.
func (a *Activities) Verify(ctx context.Context, in workflows.VerifyInput) (workflows.VerifySummary, error) {
	sum, err := a.verify(ctx, in)
	return sum, classify(err)
}

func (a *Activities) verify(ctx context.Context, in workflows.VerifyInput) (workflows.VerifySummary, error) {
	st, err := a.stream(ctx, in.Move.Spec.ID)
	if err != nil {
		return workflows.VerifySummary{}, err
	}
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.VerifySummary{}, err
	}
	var chunks atomic.Int64
	rep, err := verify.Run(ctx, s.src, s.dst, verify.Options{
		RunID: in.RunID, Set: s.srcSet, Ranges: in.Move.Spec.Ranges, RowsPerSecond: in.RowsPerSec, Holder: st,
		Metrics: a.metrics.Verify, Logger: a.log.With("move", in.Move.Spec.ID),
		Progress: func(verify.ChunkReport) { heartbeat(ctx, map[string]int64{"chunks": chunks.Add(1)}) },
	})
	if err != nil {
		return workflows.VerifySummary{}, fmt.Errorf("verify move %s: %w", in.Move.Spec.ID, err)
	}
	sum := workflows.VerifySummary{Passed: rep.OK(), Rows: rep.Rows, Mismatches: rep.Mismatches(), RowsPerSec: rep.RowsPerSecond}
	for _, t := range rep.Tables {
		for _, mm := range t.AllKeys() {
			if len(sum.Samples) < 20 {
				sum.Samples = append(sum.Samples, fmt.Sprintf("%s %s key=%v", mm.Kind, t.Table, mm.Key))
			}
		}
	}
	if !sum.Passed {
		return sum, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("verify of move %s found %d differing rows at LSN %s (e.g. %v)", in.Move.Spec.ID, sum.Mismatches, rep.LSN, sum.Samples),
			workflows.ErrTypeVerification, nil, sum)
	}
	return sum, nil
}

// PrepareReverse creates the GRACE reverse stream's publication and slot on
// the target before the cutover's write pause (slot creation waits for the
// target's running write transactions; keep that out of the pause). It
// returns the reverse slot's L0.
func (a *Activities) PrepareReverse(ctx context.Context, m workflows.MoveRef) (workflows.JoinResult, error) {
	r, err := a.prepareReverse(ctx, m)
	return r, classify(err)
}

func (a *Activities) prepareReverse(ctx context.Context, m workflows.MoveRef) (workflows.JoinResult, error) {
	s, err := a.sides(ctx, m)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	names, err := cdc.ReverseNamesFor(m.Spec.ID)
	if err != nil {
		return workflows.JoinResult{}, badInput("move id: %v", err)
	}
	if err := cdc.CreatePublication(ctx, s.dst, names.Publication, s.dstSet, m.Spec.Ranges); err != nil {
		return workflows.JoinResult{}, fmt.Errorf("target %s: %w", m.Spec.Target, err)
	}
	l0, err := a.createSlot(ctx, m.Spec.Target, names.Slot)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	return workflows.JoinResult{L0: l0.String()}, nil
}

// Cutover runs one cutover attempt with the session's stream (cutover.Run
// with the PG actions; the drain and the topology publish are ours). A
// cutover interrupted by a crash is first settled from its journal
// (cutover.Resume). An attempt that spent its write-pause budget returns a
// non-retryable ErrTypeCutoverAborted: the workflow catches up and retries
// after a backoff.
func (a *Activities) Cutover(ctx context.Context, in workflows.CutoverInput) (workflows.CutoverResult, error) {
	r, err := a.cutover(ctx, in)
	switch {
	case err == nil:
		a.metrics.cutovers.WithLabelValues("done").Inc()
		a.metrics.writePause.Observe(r.WritePause.Seconds())
	case errors.Is(err, cutover.ErrAborted):
		a.metrics.cutovers.WithLabelValues("aborted").Inc()
		return r, temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTypeCutoverAborted, nil)
	default:
		a.metrics.cutovers.WithLabelValues("error").Inc()
	}
	return r, classify(err)
}

func (a *Activities) cutover(ctx context.Context, in workflows.CutoverInput) (workflows.CutoverResult, error) {
	st, err := a.stream(ctx, in.Move.Spec.ID)
	if err != nil {
		return workflows.CutoverResult{}, err
	}
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.CutoverResult{}, err
	}
	store, err := a.store(ctx)
	if err != nil {
		return workflows.CutoverResult{}, err
	}
	control, err := a.pools.control(ctx)
	if err != nil {
		return workflows.CutoverResult{}, err
	}
	cur, err := store.Current(ctx)
	if err != nil {
		return workflows.CutoverResult{}, fmt.Errorf("read the current topology: %w", err)
	}
	spec := in.Move.Spec
	pg := &cutover.PG{
		Source: s.src, Target: s.dst, Set: s.srcSet, Ranges: spec.Ranges, Move: spec.ID, Epoch: cur.Version + 1,
		DrainFunc: func(ctx context.Context, marker string, _ time.Duration) error {
			_, err := st.DrainToMarker(ctx, marker)
			return err
		},
		PublishFunc:   func(ctx context.Context) (int64, error) { return publishCutover(ctx, store, in.Move) },
		PublishedFunc: func(ctx context.Context) (bool, error) { return cutOver(ctx, store, spec) },
	}
	j := cutover.PGJournal{Pool: control, Move: spec.ID}
	done, err := cutover.Resume(ctx, pg, j)
	if err != nil {
		return workflows.CutoverResult{}, fmt.Errorf("resume cutover of move %s: %w", spec.ID, err)
	}
	if done {
		cur, err := store.Current(ctx)
		if err != nil {
			return workflows.CutoverResult{}, fmt.Errorf("read the current topology: %w", err)
		}
		return workflows.CutoverResult{Version: cur.Version}, nil
	}
	budget := in.Budget
	if budget <= 0 {
		budget = 2 * time.Second
	}
	res, err := cutover.Run(ctx, pg, j, cutover.Options{Budget: budget})
	if err != nil {
		return workflows.CutoverResult{}, fmt.Errorf("cutover of move %s: %w", spec.ID, err)
	}
	return workflows.CutoverResult{WritePause: res.WritePause, Version: res.Version}, nil
}

// publishCutover publishes the topology that gives the move's ranges to its
// target. Sibling moves publish concurrently: a version conflict re-reads
// the topology and re-applies this move on top of it (rebase), never fails.
func publishCutover(ctx context.Context, store *topology.Store, m workflows.MoveRef) (int64, error) {
	spec := m.Spec
	for {
		cur, err := store.Current(ctx)
		if err != nil {
			return 0, fmt.Errorf("read the current topology: %w", err)
		}
		mig := cur.Migrating()
		for i := range mig {
			if mig[i].From == spec.Source && mig[i].To == spec.Target && within(mig[i].Range, spec.Ranges) {
				mig[i].Owner = spec.Target
			}
		}
		r, err := reown(cur.Ring, spec.Ranges, spec.Target)
		if err != nil {
			return 0, fmt.Errorf("ring after cutover of move %s: %w", spec.ID, err)
		}
		next, err := topology.New(r, mig, fmt.Sprintf("cutover of move %s (%s → %s)", spec.ID, spec.Source, spec.Target))
		if err != nil {
			return 0, fmt.Errorf("topology after cutover of move %s: %w", spec.ID, err)
		}
		pub, err := store.Publish(ctx, cur.Version, next.WithMigrationID(m.MigrationID))
		if errors.Is(err, topology.ErrVersionConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return pub.Version, nil
	}
}

// cutOver reports whether the current topology serves every range of the
// move from its target.
func cutOver(ctx context.Context, store *topology.Store, spec workflows.MoveSpec) (bool, error) {
	cur, err := store.Current(ctx)
	if err != nil {
		return false, fmt.Errorf("read the current topology: %w", err)
	}
	for _, r := range spec.Ranges {
		if cur.Ring.Owner(r.Hi) != spec.Target {
			return false, nil
		}
	}
	return true, nil
}

func within(r ring.Range, rs []ring.Range) bool {
	for _, o := range rs {
		if o.Lo <= r.Lo && r.Hi <= o.Hi {
			return true
		}
	}
	return false
}

// StopForward drops the forward stream's slot and publication on the source
// and its origin on the target, once the cutover is done and the stream
// stopped: from then on the slot would only pin WAL.
func (a *Activities) StopForward(ctx context.Context, m workflows.MoveRef) error {
	return classify(a.dropStreamObjects(ctx, m, false))
}

func (a *Activities) dropStreamObjects(ctx context.Context, m workflows.MoveRef, reverse bool) error {
	from, to := m.Spec.Source, m.Spec.Target
	names, err := cdc.NamesFor(m.Spec.ID)
	if reverse {
		from, to = to, from
		names, err = cdc.ReverseNamesFor(m.Spec.ID)
	}
	if err != nil {
		return badInput("move id: %v", err)
	}
	src, err := a.pools.shard(ctx, from)
	if err != nil {
		return err
	}
	dst, err := a.pools.shard(ctx, to)
	if err != nil {
		return err
	}
	if err := cdc.DropSlot(ctx, src, names.Slot); err != nil {
		return fmt.Errorf("drop slot %s on %s: %w", names.Slot, from, err)
	}
	if err := cdc.DropPublication(ctx, src, names.Publication); err != nil {
		return fmt.Errorf("drop publication %s on %s: %w", names.Publication, from, err)
	}
	if err := cdc.DropOrigin(ctx, dst, names.Origin); err != nil {
		return fmt.Errorf("drop origin %s on %s: %w", names.Origin, to, err)
	}
	return nil
}

// Cleanup ends a completed move (CLEANUP): the reverse stream's objects are
// dropped, the moved rows deleted from the source in batches, the TRUNCATE
// guards and the copy's checkpoints removed. The source keeps its fences.
func (a *Activities) Cleanup(ctx context.Context, m workflows.MoveRef) (workflows.CleanupResult, error) {
	r, err := a.cleanup(ctx, m)
	return r, classify(err)
}

func (a *Activities) cleanup(ctx context.Context, m workflows.MoveRef) (workflows.CleanupResult, error) {
	s, err := a.sides(ctx, m)
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	if err := a.dropStreamObjects(ctx, m, true); err != nil {
		return workflows.CleanupResult{}, err
	}
	stop := keepBeating(ctx, 5*time.Second, func() any { return "deleting moved rows from the source" })
	n, err := backfill.DeleteRanges(ctx, s.src, s.srcSet, m.Spec.Ranges, 0, nil)
	stop()
	if err != nil {
		return workflows.CleanupResult{}, fmt.Errorf("delete moved rows from %s: %w", m.Spec.Source, err)
	}
	if err := cutover.RemoveTruncateGuard(ctx, s.src, s.srcSet); err != nil {
		return workflows.CleanupResult{}, err
	}
	if err := cutover.RemoveTruncateGuard(ctx, s.dst, s.dstSet); err != nil {
		return workflows.CleanupResult{}, err
	}
	if err := backfill.DropCheckpoints(ctx, s.dst, m.Spec.ID); err != nil {
		return workflows.CleanupResult{}, err
	}
	return workflows.CleanupResult{RowsDeleted: n}, nil
}

// Rollback undoes a move before its cutover: both streams' slots,
// publications and origins dropped, the copied rows deleted from the target,
// the target's fences on the ranges lifted, the TRUNCATE guards removed. The
// topology is the parent's business (PublishStable).
func (a *Activities) Rollback(ctx context.Context, m workflows.MoveRef) (workflows.CleanupResult, error) {
	r, err := a.rollback(ctx, m)
	return r, classify(err)
}

func (a *Activities) rollback(ctx context.Context, m workflows.MoveRef) (workflows.CleanupResult, error) {
	store, err := a.store(ctx)
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	if done, err := cutOver(ctx, store, m.Spec); err != nil {
		return workflows.CleanupResult{}, err
	} else if done {
		return workflows.CleanupResult{}, badInput("move %s is already cut over: its rollback is the reverse cutover, not this", m.Spec.ID)
	}
	s, err := a.sides(ctx, m)
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	for _, reverse := range []bool{false, true} {
		if err := a.dropStreamObjects(ctx, m, reverse); err != nil {
			return workflows.CleanupResult{}, err
		}
	}
	stop := keepBeating(ctx, 5*time.Second, func() any { return "deleting copied rows from the target" })
	n, err := backfill.DeleteRanges(ctx, s.dst, s.dstSet, m.Spec.Ranges, 0, nil)
	stop()
	if err != nil {
		return workflows.CleanupResult{}, fmt.Errorf("delete copied rows from %s: %w", m.Spec.Target, err)
	}
	epoch, err := a.epoch(ctx)
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	if err := cutover.Unfence(ctx, s.dst, s.dstSet, m.Spec.Ranges, epoch); err != nil {
		return workflows.CleanupResult{}, err
	}
	if err := cutover.RemoveTruncateGuard(ctx, s.src, s.srcSet); err != nil {
		return workflows.CleanupResult{}, err
	}
	if err := cutover.RemoveTruncateGuard(ctx, s.dst, s.dstSet); err != nil {
		return workflows.CleanupResult{}, err
	}
	if err := backfill.DropCheckpoints(ctx, s.dst, m.Spec.ID); err != nil {
		return workflows.CleanupResult{}, err
	}
	return workflows.CleanupResult{RowsDeleted: n}, nil
}
