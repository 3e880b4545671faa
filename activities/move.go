package activities

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/temporal"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cleanup"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
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

// firing stops a phase that writes rows before a trigger or rule of the
// application can fire for reshard's writes: preflight refused them at PLAN,
// but a deploy may enable one ALWAYS or REPLICA since (tableset.CheckFiring).
// target: the copy and the forward applier write there; source: the reverse
// applier and cleanup.
func (s sides) firing(ctx context.Context, m workflows.MoveRef, source, target bool) error {
	if target {
		if err := tableset.CheckFiring(ctx, s.dst, m.Spec.Target, s.dstSet); err != nil {
			return fmt.Errorf("move %s: %w", m.Spec.ID, err)
		}
	}
	if source {
		if err := tableset.CheckFiring(ctx, s.src, m.Spec.Source, s.srcSet); err != nil {
			return fmt.Errorf("move %s: %w", m.Spec.ID, err)
		}
	}
	return nil
}

// move is the move as the cutover and rollback packages see it.
func (s sides) move(m workflows.MoveRef) cutover.Move {
	return cutover.Move{ID: m.Spec.ID, From: m.Spec.Source, To: m.Spec.Target, Source: s.src, Target: s.dst, Set: s.dstSet, Ranges: m.Spec.Ranges}
}

// rings reads the migration's pre-migration and target rings from its
// stored plan.
func (a *Activities) rings(ctx context.Context, store *topology.Store, m workflows.MoveRef) (old, target *ring.Ring, err error) {
	if m.FromVersion <= 0 || m.Request == nil {
		return nil, nil, badInput("move %s: the activity input lacks the migration's plan (from_version, request)", m.Spec.ID)
	}
	p, err := storedPlan(ctx, store, m.Request.ID, m.FromVersion, *m.Request)
	if err != nil {
		return nil, nil, err
	}
	return p.Before, p.After, nil
}

// Join is the JOINING phase (join.Run): both shards' fences and guards
// reconciled with the migrating topology, the copy's checkpoint schema, then
// publication and slot on the source. It returns the slot's consistent
// point L0. Idempotent: an existing slot is kept and its confirmed position
// returned.
func (a *Activities) Join(ctx context.Context, m workflows.MoveRef) (workflows.JoinResult, error) {
	defer keepBeating(ctx, 5*time.Second, func() any { return "joining" })()
	r, err := a.join(ctx, m)
	return r, classify(err)
}

func (a *Activities) join(ctx context.Context, m workflows.MoveRef) (workflows.JoinResult, error) {
	s, err := a.sides(ctx, m)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	if _, err := cdc.NamesFor(m.Spec.ID); err != nil {
		return workflows.JoinResult{}, badInput("move id: %v", err)
	}
	fences, err := a.fences(ctx, keyspaceOf(m.Request))
	if err != nil {
		return workflows.JoinResult{}, err
	}
	r, err := join.Run(ctx, s.move(m), join.Options{Fences: fences, SourceSet: s.srcSet, Replication: a.replication(m.Spec.Source)})
	if err != nil {
		return workflows.JoinResult{}, err
	}
	l0 := r.L0.String()
	// The target as the move starts: later streams and copy slices compare
	// with it, whichever worker runs them.
	tgt, _, err := cdc.CheckTarget(ctx, s.dst, m.Spec.Target, cdc.ServerIdentity{})
	if err != nil {
		return workflows.JoinResult{}, fmt.Errorf("target %s: %w", m.Spec.Target, err)
	}
	return workflows.JoinResult{L0: l0, Source: &workflows.SourceIdentity{SystemID: r.Source.SystemID, Timeline: r.Source.Timeline, L0: l0}, Target: identityRecord(tgt)}, nil
}

// replication connects to shard for replication (its slot is created on the
// connection: the heartbeat says so, since creating one waits for running
// write transactions). The DSN stays out of every error.
func (a *Activities) replication(shard string) func(context.Context) (*pgconn.PgConn, error) {
	return func(ctx context.Context) (*pgconn.PgConn, error) {
		dsn, err := a.pools.r.replicationDSN(shard)
		if err != nil {
			return nil, err
		}
		heartbeat(ctx, "creating slot on "+shard+" (waits for running write transactions)")
		cfg, err := pgsession.ParseConfig(dsn)
		if err != nil {
			// The parse error may quote the DSN: do not pass it on.
			return nil, badInput("the replication DSN of %s does not parse", printable(shard))
		}
		rc, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, &cdc.ConnError{Op: "replication connection to " + shard, Err: errors.New("cannot connect")}
		}
		return rc, nil
	}
}

// checkSource is cdc.CheckSource for a move's forward slot against the
// server recorded when the slot was created: a *cdc.FailedOverError (the
// move stops: ErrTypeFailedOver) when the source failed over, counted in
// reshard_failovers_total under phase. A move without a record (joined
// before it was kept) is not checked.
func (a *Activities) checkSource(ctx context.Context, m workflows.MoveRef, phase workflows.Phase) error {
	if m.Source == nil || m.Source.SystemID == "" {
		return nil
	}
	names, err := cdc.NamesFor(m.Spec.ID)
	if err != nil {
		return badInput("move id: %v", err)
	}
	since, err := pglogrepl.ParseLSN(m.Source.L0)
	if err != nil {
		return badInput("move %s: recorded L0 %q: %v", m.Spec.ID, m.Source.L0, err)
	}
	dsn, err := a.pools.r.replicationDSN(m.Spec.Source)
	if err != nil {
		return err
	}
	_, err = cdc.CheckSource(ctx, dsn, m.Spec.Source, names.Slot, sourceIdentity(m.Source), since)
	a.sourceFailedOver(err, phase)
	return err
}

func sourceIdentity(id *workflows.SourceIdentity) cdc.SourceIdentity {
	if id == nil {
		return cdc.SourceIdentity{}
	}
	return cdc.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline}
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
	// The copy relies on the slot predating it: on a promoted source (no
	// slot, another timeline) it must not copy on, nor say it is done.
	if err := a.checkSource(ctx, in.Move, workflows.PhaseSnapshotCopy); err != nil {
		return workflows.CopyProgress{}, err
	}
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.CopyProgress{}, err
	}
	if err := s.firing(ctx, in.Move, false, true); err != nil {
		return workflows.CopyProgress{}, err
	}
	until := sliceEnd(&in)
	// A cancellation (a pause or a rollback cut the slice) ends the copy
	// between chunks (backfill.Options.Stop), not inside a chunk's commit,
	// which the server could complete after the rollback had deleted the
	// copy; the slice's deadline stays the backstop.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.MaxTime)
	cut := ctx.Done()
	defer cancel()
	failover, tgt, err := a.checkTarget(ctx, in.Move, s.dst, workflows.PhaseSnapshotCopy)
	if err != nil {
		return workflows.CopyProgress{}, err
	}
	before, err := backfill.Checkpoints(ctx, s.dst, in.Move.Spec.ID)
	if err != nil {
		return workflows.CopyProgress{}, fmt.Errorf("read checkpoints of move %s: %w", in.Move.Spec.ID, err)
	}
	labels := []string{in.Move.MigrationID, in.Move.Spec.ID}
	names, err := cdc.NamesFor(in.Move.Spec.ID)
	if err != nil {
		return workflows.CopyProgress{}, badInput("move id: %v", err)
	}
	read, standby, err := a.copyReads(ctx, in.Move, s.src)
	if err != nil {
		return workflows.CopyProgress{}, err
	}
	th := backfill.NewThrottle(in.Throttle.RowsPerSec, in.Throttle.BytesPerSec)
	meter := a.rates.meter(in.Move.Spec, th, before)
	defer a.rates.release(in.Move.Spec.Target, meter)
	ad := a.adaptive(in.Move.Spec.ID, in.Throttle.Adaptive, in.Adaptive, true, th, s.src, s.dst, names.Slot)
	// Every second (the worker sends at most one heartbeat a second, see
	// runWorker): status shows the rows and the ETA of the last one, and the
	// copy's first estimate, two chunks in, while the copy is young.
	stop := keepBeating(ctx, time.Second, func() any {
		hb, left, ok := meter.heartbeat(time.Now())
		if ok {
			a.metrics.eta.WithLabelValues(labels...).Set(left.Seconds())
		}
		return beats{hb, adaptiveStatus(ad)}
	})
	var stats backfill.Stats
	// The slice's deadline ends the copy and the throttle's steps alike; a
	// copy waiting on its throttle then ends as any slice does. The slot
	// guard brakes a copy whose slot nears its WAL budget.
	guard := a.slotGuard(in.Move.Spec, th, s.src, names.Slot)
	err = guard.With(sctx, func(ctx context.Context) error {
		return ad.With(ctx, func(ctx context.Context) error {
			var err error
			stats, err = backfill.Copy(ctx, read, s.dst, backfill.Options{Standby: standby,
				Move: in.Move.Spec.ID, Set: s.srcSet, TargetSet: s.dstSet, Source: in.Move.Spec.Source, Target: in.Move.Spec.Target, Ranges: in.Move.Spec.Ranges, ChunkRows: copyChunkRows(in), TableRows: tableRows(in.Move.Spec),
				Throttle: th, Progress: meter.progress, StreamDuringCopy: in.StreamDuringCopy, Until: until, Stop: cut,
				Logger: a.log.With("move", in.Move.Spec.ID), Metrics: a.metrics.Backfill,
			})
			return err
		})
	})
	stop()
	if errors.Is(err, backfill.ErrUntil) {
		err = context.DeadlineExceeded // the slice's end, as a deadline ends it
		cancel()
	}
	if ctx.Err() != nil {
		// Cut by a pause or a rollback: what it committed, chunk and
		// checkpoint together, stays; the next slice goes on from it.
		a.keepGuard(in.Move.Spec.ID, guard, false)
		return workflows.CopyProgress{}, a.cutProgress(ctx, in, s.dst, stats)
	}
	done := err == nil
	a.keepGuard(in.Move.Spec.ID, guard, done)
	if err != nil && (sctx.Err() == nil || ctx.Err() != nil) {
		if ferr := a.checkSource(ctx, in.Move, workflows.PhaseSnapshotCopy); ferr != nil {
			return workflows.CopyProgress{}, ferr // a copy error from the source's failover: the failover is the news
		}
		return workflows.CopyProgress{}, fmt.Errorf("copy move %s: %w", in.Move.Spec.ID, err)
	}
	// The source may have failed over during the slice, the copy then
	// going on against the promoted server: not done, not silently.
	if err := a.checkSource(ctx, in.Move, workflows.PhaseSnapshotCopy); err != nil {
		return workflows.CopyProgress{}, err
	}
	cps, err := backfill.Checkpoints(ctx, s.dst, in.Move.Spec.ID)
	if err != nil {
		return workflows.CopyProgress{}, fmt.Errorf("read checkpoints of move %s: %w", in.Move.Spec.ID, err)
	}
	p := workflows.CopyProgress{Bytes: stats.Bytes, Done: done, Units: stats.Units, Adaptive: adaptiveStatus(ad), Failover: failover, Target: identityRecord(tgt)}
	finished := 0
	for _, c := range cps {
		p.Rows += c.Rows
		if c.Done {
			finished++
		}
	}
	p.Left = max(stats.Units-finished, 0)
	if end, ok := meter.end(); ok && !p.Done {
		p.CopyEnd = end
	}
	a.rates.keep(in.Move.Spec.ID, meter, p.Done)
	a.progressGauges(in, p)
	return p, nil
}

// sliceEnd defaults in.MaxTime (20 s) and returns the time a copy beside
// its stream ends its slice at (zero for a copy without it). Such a slice
// ends between chunks (the stream would hold a chunk left in flight until
// the next slice); in.MaxTime, the slice's deadline, grows by
// gatedSliceGrace to stay the backstop of a chunk that does not end.
func sliceEnd(in *workflows.CopySliceInput) time.Time {
	if in.MaxTime <= 0 {
		in.MaxTime = 20 * time.Second
	}
	if !in.StreamDuringCopy {
		return time.Time{}
	}
	until := time.Now().Add(in.MaxTime)
	in.MaxTime += gatedSliceGrace
	return until
}

// copyReads is the pool a copy slice reads its chunks from, and, with
// --read-from standby, the source's standby they come from; the slot, its
// guard and the adaptive throttle's signals stay on the primary.
func (a *Activities) copyReads(ctx context.Context, m workflows.MoveRef, primary *pgxpool.Pool) (*pgxpool.Pool, *backfill.Standby, error) {
	read, fromStandby, err := a.readSource(ctx, m, primary)
	if err != nil || !fromStandby {
		return read, nil, err
	}
	standby, err := copyStandby(m)
	if err != nil {
		return nil, nil, err
	}
	return read, standby, nil
}

// cutProgress is the error a copy slice cut by its cancellation returns: a
// cancellation carrying the copy's progress (its checkpoints, read past the
// cancellation, and the bytes this slice wrote), or, when the checkpoints
// cannot be read, ctx's error alone.
func (a *Activities) cutProgress(ctx context.Context, in workflows.CopySliceInput, dst *pgxpool.Pool, stats backfill.Stats) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cps, err := backfill.Checkpoints(rctx, dst, in.Move.Spec.ID)
	if err != nil {
		return ctx.Err()
	}
	p := workflows.CopyProgress{Bytes: stats.Bytes, Units: stats.Units}
	for _, c := range cps {
		p.Rows += c.Rows
	}
	return temporal.NewCanceledError(p)
}

// gatedSliceGrace is how long past its time a slice of a copy beside its
// stream may take to commit the chunk it is reading.
const gatedSliceGrace = time.Minute

// tableRows is the plan's estimate of each table's rows in the move, by
// which the copy paces its tables together.
func tableRows(spec workflows.MoveSpec) map[string]int64 {
	out := make(map[string]int64, len(spec.EstTables))
	for _, t := range spec.EstTables {
		out[t.Table] = t.Rows
	}
	return out
}

func (a *Activities) progressGauges(in workflows.CopySliceInput, p workflows.CopyProgress) {
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
	switch {
	case p.Done:
		a.metrics.eta.WithLabelValues(labels...).Set(0)
	case !p.CopyEnd.IsZero():
		a.metrics.eta.WithLabelValues(labels...).Set(max(time.Until(p.CopyEnd), 0).Seconds())
	}
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

// forwardOptions is the forward stream of a move (source → target).
func (a *Activities) forwardOptions(m workflows.MoveRef, s sides, l0 string) (cdc.Options, error) {
	names, err := cdc.NamesFor(m.Spec.ID)
	if err != nil {
		return cdc.Options{}, badInput("move id: %v", err)
	}
	start, err := pglogrepl.ParseLSN(l0)
	if err != nil {
		return cdc.Options{}, badInput("L0 %q: %v", l0, err)
	}
	repl, err := a.pools.r.replicationDSN(m.Spec.Source)
	if err != nil {
		return cdc.Options{}, err
	}
	plain, err := a.pools.r.dsn(m.Spec.Source)
	if err != nil {
		return cdc.Options{}, err
	}
	target, err := a.pools.r.dsn(m.Spec.Target)
	if err != nil {
		return cdc.Options{}, err
	}
	return cdc.Options{
		Move: m.Spec.ID, SourceReplicationDSN: repl, SourceDSN: plain, Source: m.Spec.Source, SourceIdentity: sourceIdentity(m.Source),
		Target: m.Spec.Target, Slot: names.Slot, Publication: names.Publication,
		StartLSN: start, TargetDSN: target, Set: s.dstSet, Ranges: m.Spec.Ranges, Origin: names.Origin,
		Logger: a.log.With("move", m.Spec.ID), Metrics: a.metrics.CDC, PeekCatchUpBytes: a.SQLCatchUpBytes,
	}, nil
}

// reverseOptions is the GRACE reverse stream (target → source), from the
// reverse slot's L0 (cdc.ReverseOptions).
func (a *Activities) reverseOptions(m workflows.MoveRef, s sides, l0 string) (cdc.Options, error) {
	start, err := pglogrepl.ParseLSN(l0)
	if err != nil {
		return cdc.Options{}, badInput("reverse L0 %q: %v", l0, err)
	}
	fwd, err := a.forwardOptions(m, s, "0/0")
	if err != nil {
		return cdc.Options{}, err
	}
	plain, err := a.pools.r.dsn(m.Spec.Source)
	if err != nil {
		return cdc.Options{}, err
	}
	repl, err := a.pools.r.replicationDSN(m.Spec.Target)
	if err != nil {
		return cdc.Options{}, err
	}
	o, err := cdc.ReverseOptions(fwd, plain, repl, s.srcSet, start)
	o.Source, o.Target = m.Spec.Target, m.Spec.Source // the reverse stream reads the new owner
	// ... on the server its slot was created on: a promoted standby of the
	// new owner, without the slot, is a *cdc.FailedOverError.
	o.SourceIdentity = sourceIdentity(m.Reverse)
	return o, err
}

func (a *Activities) runCDC(ctx context.Context, in workflows.CDCInput) error {
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return err
	}
	if err := s.firing(ctx, in.Move, in.Reverse, !in.Reverse); err != nil {
		return err
	}
	var opts cdc.Options
	if in.Reverse {
		opts, err = a.reverseOptions(in.Move, s, in.L0)
	} else {
		opts, err = a.forwardOptions(in.Move, s, in.L0)
	}
	if err != nil {
		return err
	}
	if !in.Reverse {
		opts.Target = in.Move.Spec.Target
		opts.TargetIdentity = a.targetIdentity(in.Move)
		if in.CopyGate {
			opts.CopyGate = in.Move.Spec.ID // the copy's checkpoints are kept under the move's id
		}
	} else {
		// The reverse applier writes on the old owner: the server the
		// move's forward slot was last created on (a promoted standby of
		// it since is reported as the forward target's failover is).
		opts.TargetIdentity = sourceIdentity(in.Move.Source)
	}
	st, err := cdc.New(opts)
	if err != nil {
		return badInput("stream of move %s: %v", in.Move.Spec.ID, err)
	}
	fw := a.watchFailovers(in)
	if !in.Reverse {
		a.putStream(in.Move.Spec.ID, st)
		defer a.dropStream(in.Move.Spec.ID, st)
	}
	// Why the stream waits for the shards' schemas, and the applied
	// position then: once it moves on, the wait is over.
	var wait struct {
		sync.Mutex
		why string
		at  pglogrepl.LSN
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		for {
			err := st.Run(gctx)
			if !schemaWait(err) || gctx.Err() != nil {
				return err
			}
			// A column one side lacks: the stream waits here, saying why
			// (reshard status shows it), and runs again from the target's
			// replication origin until the shards agree.
			_, app, _ := st.Positions()
			wait.Lock()
			if wait.why != err.Error() {
				a.log.Warn("stream waits for the shards' schemas", "move", in.Move.Spec.ID, "error", err)
			}
			wait.why, wait.at = err.Error(), app
			wait.Unlock()
			select {
			case <-gctx.Done():
				return gctx.Err()
			case <-time.After(time.Second + rand.N(time.Second)):
			}
		}
	})
	// Every second: the workflow's cancellation (the phase it served is
	// over) arrives with the answer to a heartbeat.
	stop := keepBeating(gctx, time.Second, func() any {
		rcv, app, ack := st.Positions()
		hb := map[string]string{"received": rcv.String(), "applied": app.String(), "acked": ack.String(),
			workflows.HeartbeatLagBytes: strconv.FormatInt(st.LagBytes(), 10)}
		if f := fw.seen(st); f != "" {
			hb[workflows.HeartbeatFailover] = f
		}
		if opts.CopyGate != "" { // the copy gate at work: changes the copy will read, and changes waiting for a chunk
			g := st.GateStats()
			hb[workflows.HeartbeatGateSkipped], hb[workflows.HeartbeatGateHeld] = strconv.FormatInt(g.Skipped, 10), strconv.FormatInt(g.Held, 10)
		}
		wait.Lock()
		if wait.why != "" && app > wait.at {
			a.log.Info("stream no longer waits for the shards' schemas", "move", in.Move.Spec.ID)
			wait.why = ""
		}
		if wait.why != "" {
			hb[workflows.HeartbeatWaiting] = wait.why
		}
		wait.Unlock()
		return hb
	})
	err = g.Wait()
	stop()
	fw.ended(st, err)
	if !in.Reverse && ctx.Err() == nil {
		a.streamEnded(in.Move.Spec.ID, in.Move.Stream, st, err)
	}
	a.metrics.streamStopped(opts.Move)
	if ctx.Err() != nil {
		return ctx.Err() // cancelled by the workflow: the phase it served is over
	}
	if err == nil {
		return errors.New("the stream ended by itself")
	}
	return fmt.Errorf("stream of move %s: %w", in.Move.Spec.ID, err)
}

// sameShapes: both sets have the same columns, table by table.
func sameShapes(a, b tableset.Set) bool {
	if len(a.Tables) != len(b.Tables) {
		return false
	}
	for i := range a.Tables {
		if !slices.Equal(a.Tables[i].Columns, b.Tables[i].Columns) {
			return false
		}
	}
	return true
}

// schemaWait: the stream ended because the shards' columns disagree (a
// change on its way, or made by hand on one shard).
func schemaWait(err error) bool {
	var wait *tableset.ColumnWaitError
	var gone *cdc.ColumnVanishedError
	return errors.As(err, &wait) || errors.As(err, &gone)
}

// CDCStatus reports the forward stream's lag: the source's current WAL
// position minus what the applier has committed.
func (a *Activities) CDCStatus(ctx context.Context, m workflows.MoveRef) (workflows.CDCStatus, error) {
	st, err := a.stream(ctx, m, streamWait)
	if err != nil {
		return workflows.CDCStatus{}, classify(err)
	}
	src, err := a.pools.shard(ctx, m.Spec.Source)
	if err != nil {
		return workflows.CDCStatus{}, classify(err)
	}
	names, err := cdc.NamesFor(m.Spec.ID)
	if err != nil {
		return workflows.CDCStatus{}, classify(err)
	}
	// The slot's confirmed position is read with the WAL's end: until this
	// session's stream has applied something (it has not connected yet, a
	// copy of seconds can end first), its applied position is 0/0, and the
	// lag from there, the whole WAL, held the move in CDC_CATCH_UP for a
	// poll interval it did not need. What the stream has left then is what
	// the slot has not confirmed.
	var cur, confirmed string
	if err := src.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, coalesce((SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1), '0/0')::text`,
		names.Slot).Scan(&cur, &confirmed); err != nil {
		return workflows.CDCStatus{}, classify(fmt.Errorf("read WAL position of %s: %w", m.Spec.Source, err))
	}
	end, err := pglogrepl.ParseLSN(cur)
	if err != nil {
		return workflows.CDCStatus{}, classify(err)
	}
	rcv, app, _ := st.Positions()
	from := app
	if from == 0 {
		if from, err = pglogrepl.ParseLSN(confirmed); err != nil {
			return workflows.CDCStatus{}, classify(err)
		}
	}
	lag := int64(0)
	if end > from {
		lag = int64(end - from)
	}
	out := workflows.CDCStatus{Received: rcv.String(), Applied: app.String(), LagBytes: lag, Target: identityRecord(st.TargetIdentity())}
	if f, ok := st.TargetFailedOver(); ok {
		out.Failover = f.String()
	}
	return out, nil
}

// Verify compares source and target at one LSN, holding the session's
// stream there. A mismatch is a non-retryable error of type
// ErrTypeVerification carrying the VerifySummary.
func (a *Activities) Verify(ctx context.Context, in workflows.VerifyInput) (workflows.VerifySummary, error) {
	sum, err := a.verify(ctx, in)
	return sum, classify(err)
}

func (a *Activities) verify(ctx context.Context, in workflows.VerifyInput) (workflows.VerifySummary, error) {
	st, err := a.stream(ctx, in.Move, streamWait)
	if err != nil {
		return workflows.VerifySummary{}, err
	}
	if err := a.checkSource(ctx, in.Move, workflows.PhaseVerify); err != nil {
		return workflows.VerifySummary{}, err
	}
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.VerifySummary{}, err
	}
	var waiting atomic.Pointer[string] // why verify waits for the shards' schemas
	est := in.EstRows
	if est <= 0 {
		est = in.Move.Spec.EstRows
	}
	// Adaptive: starts slow (verify reads faster than the copy writes, its
	// rate is not the copy's) against the copy's baselines.
	th := backfill.NewThrottle(in.RowsPerSec, 0)
	meter := newVerifyMeter(est, func() float64 { r, _ := th.InForce(); return r })
	ad := a.adaptive(in.Move.Spec.ID, in.Adaptive, in.Baseline, false, th, s.src, s.dst, "")
	defer a.follow(ctx, workflows.Throttle{RowsPerSec: in.RowsPerSec, Adaptive: in.Adaptive}, th, true, ad)()
	// Every second, as the copy: status's ETA is the heartbeat's end, and
	// a throttled chunk may take longer than the heartbeat timeout.
	stop := keepBeating(ctx, time.Second, func() any {
		if w := waiting.Load(); w != nil {
			return map[string]string{workflows.HeartbeatWaiting: *w}
		}
		return beats{meter.heartbeat(time.Now()), adaptiveStatus(ad)}
	})
	defer stop()
	var rep *verify.Report
	for {
		rep, err = a.verifyOnce(ctx, in, s, st, th, ad, meter)
		var wait *tableset.ColumnWaitError
		if !errors.As(err, &wait) && !verify.SchemaMoved(err) || ctx.Err() != nil {
			break
		}
		if !errors.As(err, &wait) {
			// A column went missing under a comparison: a schema change
			// only if the shapes moved; else a fault that waiting would hide.
			now, serr := a.sides(ctx, in.Move)
			if serr != nil || sameShapes(s.srcSet, now.srcSet) && sameShapes(s.dstSet, now.dstSet) {
				break
			}
		}
		// A schema change on its way (or made on one shard by hand):
		// verify compares nothing until the shards agree, says why, and
		// reads the shapes again.
		if w := waiting.Load(); w == nil || *w != err.Error() {
			a.log.Warn("verify waits for the shards' schemas", "move", in.Move.Spec.ID, "error", err)
		}
		msg := err.Error()
		waiting.Store(&msg)
		heartbeat(ctx, map[string]string{workflows.HeartbeatWaiting: msg})
		select {
		case <-ctx.Done():
			return workflows.VerifySummary{}, ctx.Err()
		case <-time.After(2*time.Second + rand.N(time.Second)):
		}
		if s, err = a.sides(ctx, in.Move); err != nil {
			return workflows.VerifySummary{}, err
		}
	}
	waiting.Store(nil)
	// The source may have failed over while verify read it: its pool
	// reconnects to the new primary between chunks, and the stream that
	// held the LSN ended. Such a verify vouches for nothing (the changes
	// after the old slot's last position may be missing on the target), so
	// the source is checked again at the end: a failover is recovered in
	// VERIFY (repair, then a new run). make e2e on 7f8db44: a verify
	// throttled to 50 rows/s passed on the new primary, and the move failed
	// in CUTOVER, where the cutover found the stream ended.
	var fe *cdc.FailedOverError
	if cerr := a.checkSource(ctx, in.Move, workflows.PhaseVerify); errors.As(cerr, &fe) || cerr != nil && err == nil {
		return workflows.VerifySummary{}, cerr
	}
	if err != nil {
		return workflows.VerifySummary{}, fmt.Errorf("verify move %s: %w", in.Move.Spec.ID, err)
	}
	return verifySummary(in, rep)
}

// verifyOnce is one verify.Run of the move.
func (a *Activities) verifyOnce(ctx context.Context, in workflows.VerifyInput, s sides, st *cdc.Stream, th *backfill.Throttle, ad *backfill.Adaptive, meter *verifyMeter) (*verify.Report, error) {
	// With --read-from standby the source's side is read on its standby;
	// a re-check reads the primary's WAL position beside its snapshot, so
	// it reads the primary.
	src, primary := s.src, (*pgxpool.Pool)(nil)
	if !in.Recheck {
		read, fromStandby, err := a.readSource(ctx, in.Move, s.src)
		if err != nil {
			return nil, err
		}
		if fromStandby {
			src, primary = read, s.src
		}
	}
	var rep *verify.Report
	err := ad.With(ctx, func(ctx context.Context) error {
		var err error
		rep, err = verify.Run(ctx, src, s.dst, verify.Options{
			Primary: primary, RunID: in.RunID, Set: s.srcSet, TargetSet: s.dstSet, Source: in.Move.Spec.Source, Target: in.Move.Spec.Target,
			Ranges: in.Move.Spec.Ranges, Throttle: th, Holder: st, Recheck: in.Recheck,
			ChunkRows: verifyChunkRows(in.Move.Request),
			Metrics:   a.metrics.Verify, Logger: a.log.With("move", in.Move.Spec.ID),
			Planned: func(p verify.PlanInfo) {
				meter.planned(p, time.Now())
				heartbeat(ctx, meter.heartbeat(time.Now()), adaptiveStatus(ad))
			},
			Progress: func(c verify.ChunkReport) {
				meter.chunk(c)
				heartbeat(ctx, meter.heartbeat(time.Now()), adaptiveStatus(ad))
			},
		})
		return err
	})
	return rep, err
}

// verifySummary is the workflow's summary of a finished verify.
func verifySummary(in workflows.VerifyInput, rep *verify.Report) (workflows.VerifySummary, error) {
	sum := workflows.VerifySummary{Passed: rep.OK(), Rows: rep.Rows, ReusedRows: rep.ReusedRows, ReusedLSN: rep.ReusedLSN, ReusedAt: rep.ReusedAt,
		Mismatches: rep.Mismatches(), RowsPerSec: rep.RowsPerSecond, Problem: rep.Problem}
	for _, t := range rep.Tables {
		for _, mm := range t.AllKeys() {
			if len(sum.Samples) < 20 {
				sum.Samples = append(sum.Samples, fmt.Sprintf("%s %s key=%v", mm.Kind, t.Table, mm.Key))
			}
		}
	}
	if !sum.Passed {
		msg := fmt.Sprintf("verify of move %s found %d differing rows at LSN %s (e.g. %v)", in.Move.Spec.ID, sum.Mismatches, rep.LSN, sum.Samples)
		if sum.Problem != "" {
			msg = fmt.Sprintf("verify of move %s %s", in.Move.Spec.ID, sum.Problem)
		}
		return sum, temporal.NewNonRetryableApplicationError(msg, workflows.ErrTypeVerification, nil, sum)
	}
	return sum, nil
}

// copyChunkRows is the copy chunk size of a slice: the operator's live
// change (reshard throttle --copy-chunk-rows) over the migration's setting.
func copyChunkRows(in workflows.CopySliceInput) int {
	if in.Throttle.ChunkRows > 0 {
		return in.Throttle.ChunkRows
	}
	return in.ChunkRows
}

// verifyChunkRows is the migration's verify chunk size.
func verifyChunkRows(req *workflows.MigrationRequest) int {
	if req == nil {
		return workflows.DefaultVerifyChunkRows
	}
	return req.WithDefaults().VerifyChunkRows
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
	// Before the cutover: from it on, the reverse applier writes on the
	// source, and the forward one still writes on the target.
	if err := s.firing(ctx, m, true, true); err != nil {
		return workflows.JoinResult{}, err
	}
	repl, err := a.pools.r.replicationDSN(m.Spec.Target)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	stop := keepBeating(ctx, 5*time.Second, func() any { return "creating the reverse slot" })
	defer stop()
	create := join.Reverse
	if m.RecreateReverse {
		// A repair wrote the target's moving ranges since the slot was made
		// (no origin: the reverse stream would send its rows back). Only
		// while the target does not own the ranges: from the cutover's
		// publish on the slot holds the target's writes the source needs.
		store, err := a.store(ctx, keyspaceOf(m.Request))
		if err != nil {
			return workflows.JoinResult{}, err
		}
		cur, err := store.Current(ctx)
		if err != nil {
			return workflows.JoinResult{}, fmt.Errorf("read the current topology: %w", err)
		}
		if topology.Owns(cur.Ring, m.Spec.Target, m.Spec.Ranges) {
			return workflows.JoinResult{}, badInput("move %s: the reverse slot on %s is not made again: topology v%d already gives the moving ranges to %s (a cutover published), and the slot holds its writes since then", m.Spec.ID, m.Spec.Target, cur.Version, m.Spec.Target)
		}
		create = join.RecreateReverse
	}
	names, l0, err := create(ctx, s.move(m), repl)
	if err != nil {
		return workflows.JoinResult{}, err
	}
	// The new owner's server, which the reverse stream, a rollback's drain
	// and a reverse repair compare with: a failover of the new owner (the
	// slot lost with the promotion) is then told from "no changes". A
	// failover between the slot's creation and this look is a missing slot
	// here, and the activity's retry creates it on the new primary.
	id, err := cdc.CheckSource(ctx, repl, m.Spec.Target, names.Slot, cdc.SourceIdentity{}, l0)
	if err != nil {
		return workflows.JoinResult{}, fmt.Errorf("reverse slot of move %s: %w", m.Spec.ID, err)
	}
	return workflows.JoinResult{L0: l0.String(), Source: &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline, L0: l0.String()}}, nil
}

// Cutover runs one cutover attempt with the session's stream (cutover.Run
// with the PG actions; the drain and the topology publish are ours). A
// cutover interrupted by a crash is first settled from its journal
// (cutover.Resume). An attempt that spent its write-pause budget returns a
// non-retryable ErrTypeCutoverAborted: the workflow catches up and retries
// after a backoff.
func (a *Activities) Cutover(ctx context.Context, in workflows.CutoverInput) (workflows.CutoverResult, error) {
	defer keepBeating(ctx, time.Second, func() any { return "cutover" })()
	r, paused, err := a.cutover(ctx, in)
	r.Failover = a.streamFailover(in.Move.Spec.ID)
	if paused > 0 { // every attempt's pause, aborted or failed ones included
		a.metrics.writePause.Observe(paused.Seconds())
	}
	switch {
	case err == nil:
		a.metrics.cutovers.WithLabelValues("done").Inc()
	case errors.Is(err, cutover.ErrAborted):
		a.metrics.cutovers.WithLabelValues("aborted").Inc()
		return r, temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTypeCutoverAborted, nil, r)
	default:
		a.metrics.cutovers.WithLabelValues("error").Inc()
	}
	return r, classify(err)
}

// cutover also returns the write pause this activity added to the move's
// (an earlier attempt's it settled included).
func (a *Activities) cutover(ctx context.Context, in workflows.CutoverInput) (res workflows.CutoverResult, paused time.Duration, err error) {
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.CutoverResult{}, 0, err
	}
	fences, err := a.fences(ctx, keyspaceOf(in.Move.Request))
	if err != nil {
		return workflows.CutoverResult{}, 0, err
	}
	store, control := fences.Store, fences.Pool
	spec := in.Move.Spec
	_, target, err := a.rings(ctx, store, in.Move)
	if err != nil {
		return workflows.CutoverResult{}, 0, err
	}
	h := topology.CutOver(target, spec.Ranges, spec.Source, spec.Target, fmt.Sprintf("cutover of move %s (%s → %s)", spec.ID, spec.Source, spec.Target))
	h.MigrationID = in.Move.MigrationID
	// This attempt is the move's newest from here: an older one that wakes
	// up (Temporal retried it here while it was cut off) changes nothing.
	j, err := cutover.PGJournal{Pool: control, Move: spec.ID}.Claim(ctx)
	if err != nil {
		return workflows.CutoverResult{}, 0, err
	}
	// Whatever happens, the result says what every attempt so far cost the
	// application (aborted attempts return it with their error).
	before, err := j.Pauses(ctx)
	if err != nil {
		return workflows.CutoverResult{}, 0, err
	}
	var run *cutover.Result // the attempt that succeeded
	defer func() {
		if p, perr := j.Pauses(context.WithoutCancel(ctx)); perr == nil {
			res.Pauses = workflows.WritePauses{Total: p.Total, Longest: p.Longest, Attempts: p.Fenced}
			paused = p.Total - before.Total
			if run != nil {
				res.PauseSteps = pauseSteps(*run, paused)
			}
		}
	}()
	// Settle an earlier attempt first (a source it left fenced is unfenced as
	// soon as it can be reached); that needs no stream, so it does not wait
	// for one that may have ended with the attempt.
	done, err := cutover.Resume(ctx, cutover.NewPG(s.move(in.Move), nil, fences, h, j), j)
	if err != nil {
		return res, 0, fmt.Errorf("resume cutover of move %s: %w", spec.ID, err)
	}
	if done {
		cur, err := store.Current(ctx)
		if err != nil {
			return res, 0, fmt.Errorf("read the current topology: %w", err)
		}
		res.Version = cur.Version
		return res, 0, nil
	}
	st, err := a.stream(ctx, in.Move, streamWait)
	if err != nil {
		return res, 0, err
	}
	budget := in.Budget
	if budget <= 0 {
		budget = workflows.DefaultCutoverBudget
	}
	r, err := cutover.Run(ctx, cutover.NewPG(s.move(in.Move), st, fences, h, j), j, cutover.Options{Budget: budget})
	if err != nil {
		return res, 0, runError(spec.ID, err)
	}
	res.WritePause, res.Version, run = r.WritePause, r.Version, &r
	return res, 0, nil
}

// runError is the error of cutover.Run as the Cutover activity returns it.
// A failover met inside the write pause (the drain found the stream ended
// on it) aborts the attempt, source unfenced: ErrAborted, which the
// workflow retries after a catch-up that recovers the source. But when the
// abort could not unfence the source either (for cutover.UnfenceFor), the
// error wraps the failover and no ErrAborted: as ErrTypeFailedOver the
// workflow would recover the move with the source still fenced, its writes
// to the moving ranges refused through the repair and the new verify. So
// that error goes up as text, which classify leaves retryable: Temporal
// runs the activity again, whose cutover.Resume unfences the source first;
// it then meets the ended stream's failover before it fences anything,
// which the workflow recovers.
func runError(move string, err error) error {
	if errors.Is(err, cdc.ErrFailedOver) && !errors.Is(err, cutover.ErrAborted) {
		return fmt.Errorf("cutover of move %s: %s", move, err.Error())
	}
	return fmt.Errorf("cutover of move %s: %w", move, err)
}

// pauseSteps are the steps of a cutover inside its write pause, pause as
// its journal counts it (from the record before the fence to the one after
// the unfence, what status shows): the fence to the unfence, and the rest
// as "journal", the records written to the control database between them.
func pauseSteps(r cutover.Result, pause time.Duration) []workflows.PauseStep {
	var out []workflows.PauseStep
	var sum time.Duration
	for _, s := range r.Steps {
		if s.Step == cutover.StepGates {
			continue
		}
		out = append(out, workflows.PauseStep{Step: string(s.Step), Duration: s.Duration})
		sum += s.Duration
	}
	if rest := pause - sum; rest > 0 {
		out = append(out, workflows.PauseStep{Step: "journal", Duration: rest})
	}
	return out
}

// StopForward drops the forward stream's slot and publication on the source
// and its origin on the target, once the cutover is done and the stream
// stopped: from then on the slot would only pin WAL.
func (a *Activities) StopForward(ctx context.Context, m workflows.MoveRef) error {
	if _, err := cdc.NamesFor(m.Spec.ID); err != nil {
		return classify(badInput("move id: %v", err))
	}
	src, err := a.pools.shard(ctx, m.Spec.Source)
	if err != nil {
		return classify(err)
	}
	dst, err := a.pools.shard(ctx, m.Spec.Target)
	if err != nil {
		return classify(err)
	}
	return classify(cleanup.DropForward(ctx, cutover.Move{ID: m.Spec.ID, From: m.Spec.Source, To: m.Spec.Target, Source: src, Target: dst}))
}

// Cleanup ends a completed move (CLEANUP, cleanup.Run): the ranges
// published stable on the new owner, both streams' objects dropped, the
// moved rows deleted from the old owner in batches, the work rows and the
// TRUNCATE guards removed. The old owner keeps its fences.
func (a *Activities) Cleanup(ctx context.Context, in workflows.EndInput) (workflows.CleanupResult, error) {
	r, err := a.cleanup(ctx, in)
	return r, classify(err)
}

func (a *Activities) cleanup(ctx context.Context, in workflows.EndInput) (workflows.CleanupResult, error) {
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	fences, err := a.fences(ctx, keyspaceOf(in.Move.Request))
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	_, target, err := a.rings(ctx, fences.Store, in.Move)
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	// The deletes run on the old owner: its signals alone, against the
	// copy's source baseline; no slot is left by then.
	th := backfill.NewThrottle(0, 0)
	ad := a.adaptive(in.Move.Spec.ID, in.Adaptive, in.Baseline, false, th, s.src, nil, "")
	defer a.follow(ctx, workflows.Throttle{Adaptive: in.Adaptive}, th, false, ad)()
	stop := keepBeating(ctx, 5*time.Second, func() any {
		return beats{"cleaning up: deleting moved rows from the old owner", adaptiveStatus(ad)}
	})
	var res cleanup.Result
	err = ad.With(ctx, func(ctx context.Context) error {
		var err error
		res, err = cleanup.Run(ctx, s.move(in.Move), cleanup.Options{
			Fences: fences, Target: target, VerifyRunIDs: in.VerifyRunIDs, MigrationID: in.Move.MigrationID,
			Throttle: th, Logger: a.log.With("move", in.Move.Spec.ID),
		})
		return err
	})
	stop()
	if err != nil {
		return workflows.CleanupResult{}, fmt.Errorf("cleanup of move %s: %w", in.Move.Spec.ID, err)
	}
	// Only now are the moved rows gone from the old owner (the ranges were
	// published stable before): the fact SQL readers wait for.
	if err := fences.Store.RecordMoveEnd(ctx, moveEnd(in.Move, topology.MoveCleanedUp)); err != nil {
		return workflows.CleanupResult{}, err
	}
	a.metrics.moveEnded(in.Move.Spec.ID)
	return workflows.CleanupResult{RowsDeleted: res.Deleted}, nil
}

// Rollback undoes a move: before its cutover (rollback.BeforeCutover: the
// slot dropped, the copied rows deleted from the target, its fences lifted,
// the ranges given back in the topology), or during GRACE
// (rollback.DuringGrace: the cutover in reverse over the reverse stream,
// then the new owner cleaned). The workflow has stopped the streams.
func (a *Activities) Rollback(ctx context.Context, in workflows.EndInput) (workflows.CleanupResult, error) {
	version, err := a.rollback(ctx, in)
	if err == nil {
		a.metrics.moveEnded(in.Move.Spec.ID)
	}
	return workflows.CleanupResult{Version: version}, classify(err)
}

// rollback also returns the topology version a reverse cutover published
// (0: none).
func (a *Activities) rollback(ctx context.Context, in workflows.EndInput) (int64, error) {
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return 0, err
	}
	store, err := a.store(ctx, keyspaceOf(in.Move.Request))
	if err != nil {
		return 0, err
	}
	control, err := a.pools.control(ctx)
	if err != nil {
		return 0, err
	}
	old, _, err := a.rings(ctx, store, in.Move)
	if err != nil {
		return 0, err
	}
	// The deletes run on the new owner: its signals alone, against a
	// baseline measured now (the streams are stopped; the copy measured
	// that shard under its own writes).
	th := backfill.NewThrottle(0, 0)
	ad := a.adaptive(in.Move.Spec.ID, in.Adaptive, nil, false, th, s.dst, nil, "")
	defer a.follow(ctx, workflows.Throttle{Adaptive: in.Adaptive}, th, false, ad)()
	o := rollback.Options{Store: store, Control: control, Old: old, VerifyRunIDs: in.VerifyRunIDs, Budget: in.Budget,
		MigrationID: in.Move.MigrationID, Logger: a.log.With("move", in.Move.Spec.ID), Throttle: th,
		CheckReverse: func(ctx context.Context) error { return a.checkReverse(ctx, in.Move) }}
	stop := keepBeating(ctx, 5*time.Second, func() any { return beats{"rolling back", adaptiveStatus(ad)} })
	defer stop()
	mv := s.move(in.Move)
	if !in.Grace {
		err := ad.With(ctx, func(ctx context.Context) error { return rollback.BeforeCutover(ctx, mv, o) })
		// A cutover attempt cancelled in the middle (the workflow was
		// cancelled) may have published: reverse it, over the reverse slot
		// it prepared.
		if errors.Is(err, rollback.ErrCutOver) && in.ReverseL0 != "" {
			in.Grace = true
		} else if err != nil {
			return 0, fmt.Errorf("rollback of move %s: %w", in.Move.Spec.ID, err)
		} else {
			return 0, store.RecordMoveEnd(ctx, moveEnd(in.Move, topology.MoveRolledBack))
		}
	}
	rev, err := a.reverseOptions(in.Move, s, in.ReverseL0)
	if err != nil {
		return 0, err
	}
	var version int64
	err = ad.With(ctx, func(ctx context.Context) error {
		res, err := rollback.DuringGrace(ctx, mv, rev, o)
		version = res.Version
		return err
	})
	if err != nil {
		// An aborted reverse cutover (budget spent) is retried by the
		// activity's retry policy, after its backoff.
		return 0, fmt.Errorf("rollback of move %s during GRACE: %w", in.Move.Spec.ID, err)
	}
	return version, store.RecordMoveEnd(ctx, moveEnd(in.Move, topology.MoveRolledBack))
}

// moveEnd describes the end of a move for the control database
// (reshard.move_ends).
func moveEnd(m workflows.MoveRef, outcome topology.MoveOutcome) topology.MoveEnd {
	return topology.MoveEnd{MigrationID: m.MigrationID, MoveID: m.Spec.ID, From: m.Spec.Source, To: m.Spec.Target,
		Ranges: m.Spec.Ranges, Outcome: outcome}
}

// RecoverSource creates the move's slot again on its source's new primary
// after a failover (the workflow has stopped the stream): the publication
// is made sure of, a lost slot dropped, the target's replication origin
// dropped (its position is in the old slot's history) and the slot created,
// its consistent point the stream's new start. A source that did not fail
// over returns an empty result and changes nothing.
func (a *Activities) RecoverSource(ctx context.Context, m workflows.MoveRef) (workflows.RecoverSourceResult, error) {
	defer keepBeating(ctx, 5*time.Second, func() any { return "creating the slot again on the new primary" })()
	r, err := a.recoverSource(ctx, m)
	return r, classify(err)
}

func (a *Activities) recoverSource(ctx context.Context, m workflows.MoveRef) (workflows.RecoverSourceResult, error) {
	names, err := cdc.NamesFor(m.Spec.ID)
	if err != nil {
		return workflows.RecoverSourceResult{}, badInput("move id: %v", err)
	}
	dsn, err := a.pools.r.replicationDSN(m.Spec.Source)
	if err != nil {
		return workflows.RecoverSourceResult{}, err
	}
	var since pglogrepl.LSN
	if m.Source != nil {
		since, _ = pglogrepl.ParseLSN(m.Source.L0)
	}
	_, err = cdc.CheckSource(ctx, dsn, m.Spec.Source, names.Slot, sourceIdentity(m.Source), since)
	var fe *cdc.FailedOverError
	if err == nil {
		return workflows.RecoverSourceResult{}, nil
	}
	if !errors.As(err, &fe) {
		return workflows.RecoverSourceResult{}, err
	}
	s, err := a.sides(ctx, m)
	if err != nil {
		return workflows.RecoverSourceResult{}, err
	}
	return a.recreateStream(ctx, m, fe, names, streamEnds{pub: s.src, sub: s.dst, pubSet: s.srcSet, pubShard: m.Spec.Source, subShard: m.Spec.Target,
		slotWhat: "slot", originWhat: "origin", pubWhat: "source", log: "source failed over: slot created again"})
}

// streamEnds are the two ends of one of a move's streams as a failover
// recovery sees them: the publisher (the source, or the new owner for the
// reverse stream) and the subscriber, with the words its errors and log use.
type streamEnds struct {
	pub, sub                      *pgxpool.Pool
	pubSet                        tableset.Set
	pubShard, subShard            string
	slotWhat, originWhat, pubWhat string
	log                           string
}

// recreateStream makes a stream's objects again after its publisher failed
// over (fe): the lost slot dropped, the publication made again, the
// subscriber's origin dropped (the new slot starts elsewhere), and a new
// slot, whose position and server identity it returns.
func (a *Activities) recreateStream(ctx context.Context, m workflows.MoveRef, fe *cdc.FailedOverError, names cdc.Names, e streamEnds) (workflows.RecoverSourceResult, error) {
	if fe.SlotLost {
		if err := cdc.DropSlot(ctx, e.pub, names.Slot); err != nil {
			return workflows.RecoverSourceResult{}, fmt.Errorf("drop lost %s %s on %s: %w", e.slotWhat, names.Slot, e.pubShard, err)
		}
	}
	if err := cdc.CreatePublication(ctx, e.pub, names.Publication, e.pubSet, m.Spec.Ranges); err != nil {
		return workflows.RecoverSourceResult{}, fmt.Errorf("%s %s: %w", e.pubWhat, e.pubShard, err)
	}
	if err := cdc.DropOrigin(ctx, e.sub, names.Origin); err != nil {
		return workflows.RecoverSourceResult{}, fmt.Errorf("drop %s %s on %s: %w", e.originWhat, names.Origin, e.subShard, err)
	}
	l0, id, err := join.Slot(ctx, a.replication(e.pubShard), e.pubShard, names.Slot)
	if err != nil {
		return workflows.RecoverSourceResult{}, err
	}
	a.log.Warn(e.log, "move", m.Spec.ID, "shard", e.pubShard, "cause", fe.Error(), "lsn", l0.String(), "timeline", id.Timeline)
	return workflows.RecoverSourceResult{L0: l0.String(), Source: &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline, L0: l0.String()}}, nil
}

// Repair makes the target's moving ranges equal to the source's
// (verify.Repair: only the chunks that differ are rewritten), the stream
// stopped; after a source failover, before the stream starts from the new
// slot.
func (a *Activities) Repair(ctx context.Context, in workflows.RepairInput) (workflows.RepairResult, error) {
	r, err := a.repair(ctx, in)
	return r, classify(err)
}

func (a *Activities) repair(ctx context.Context, in workflows.RepairInput) (workflows.RepairResult, error) {
	check := func(ctx context.Context, m workflows.MoveRef) error { return a.checkSource(ctx, m, in.Phase) }
	if in.Reverse {
		check = a.checkReverse
	}
	if err := check(ctx, in.Move); err != nil {
		return workflows.RepairResult{}, err
	}
	s, err := a.sides(ctx, in.Move)
	if err != nil {
		return workflows.RepairResult{}, err
	}
	// Reverse (GRACE, after the new owner failed over): the new owner is
	// the truth, the old owner's copy of the moving ranges is rewritten.
	truth, repaired, set := s.src, s.dst, s.srcSet
	if in.Reverse {
		truth, repaired, set = s.dst, s.src, s.dstSet
	}
	var chunks atomic.Int64
	stop := keepBeating(ctx, 5*time.Second, func() any { return map[string]int64{"repair_chunks": chunks.Load()} })
	defer stop()
	rep, err := verify.Repair(ctx, truth, repaired, verify.Options{
		Set: set, Ranges: in.Move.Spec.Ranges, ChunkRows: verifyChunkRows(in.Move.Request),
		Logger:   a.log.With("move", in.Move.Spec.ID),
		Progress: func(verify.ChunkReport) { chunks.Add(1) },
	})
	if err != nil {
		return workflows.RepairResult{}, fmt.Errorf("repair move %s: %w", in.Move.Spec.ID, err)
	}
	// Read and written on the server the slot is on: a failover meanwhile
	// is recovered again.
	if err := check(ctx, in.Move); err != nil {
		return workflows.RepairResult{}, err
	}
	return workflows.RepairResult{Chunks: rep.Chunks, Repaired: rep.Repaired, RowsCopied: rep.RowsCopied, RowsDeleted: rep.RowsDeleted}, nil
}

// checkReverse is cdc.CheckSource for a move's reverse slot, on the new
// owner, against the server recorded when it was created (MoveRef.Reverse):
// a *cdc.FailedOverError when the new owner failed over. A move without a
// record (cut over before it was kept) is not checked.
func (a *Activities) checkReverse(ctx context.Context, m workflows.MoveRef) error {
	_, err := a.reverseFailover(ctx, m)
	return err
}

// reverseFailover is checkReverse's look at the new owner: the server
// found, and a *cdc.FailedOverError when it is not the recorded one or the
// reverse slot is gone.
func (a *Activities) reverseFailover(ctx context.Context, m workflows.MoveRef) (cdc.SourceIdentity, error) {
	if m.Reverse == nil || m.Reverse.SystemID == "" {
		return cdc.SourceIdentity{}, nil
	}
	names, err := cdc.ReverseNamesFor(m.Spec.ID)
	if err != nil {
		return cdc.SourceIdentity{}, badInput("move id: %v", err)
	}
	since, err := pglogrepl.ParseLSN(m.Reverse.L0)
	if err != nil {
		return cdc.SourceIdentity{}, badInput("move %s: recorded reverse L0 %q: %v", m.Spec.ID, m.Reverse.L0, err)
	}
	dsn, err := a.pools.r.replicationDSN(m.Spec.Target)
	if err != nil {
		return cdc.SourceIdentity{}, err
	}
	return cdc.CheckSource(ctx, dsn, m.Spec.Target, names.Slot, sourceIdentity(m.Reverse), since)
}

// RecoverReverse creates the move's reverse slot again on the new owner's
// new primary after a failover under GRACE's reverse stream (the workflow
// has stopped it), as RecoverSource does the forward slot: the reverse
// publication made sure of, a lost slot dropped, the old owner's reverse
// origin dropped (its position is in the old slot's history) and the slot
// created, its consistent point the reverse stream's new start. A new owner
// that did not fail over returns an empty result and changes nothing.
func (a *Activities) RecoverReverse(ctx context.Context, m workflows.MoveRef) (workflows.RecoverSourceResult, error) {
	defer keepBeating(ctx, 5*time.Second, func() any { return "creating the reverse slot again on the new owner's new primary" })()
	r, err := a.recoverReverse(ctx, m)
	return r, classify(err)
}

func (a *Activities) recoverReverse(ctx context.Context, m workflows.MoveRef) (workflows.RecoverSourceResult, error) {
	names, err := cdc.ReverseNamesFor(m.Spec.ID)
	if err != nil {
		return workflows.RecoverSourceResult{}, badInput("move id: %v", err)
	}
	_, err = a.reverseFailover(ctx, m)
	var fe *cdc.FailedOverError
	if err == nil {
		return workflows.RecoverSourceResult{}, nil
	}
	if !errors.As(err, &fe) {
		return workflows.RecoverSourceResult{}, err
	}
	s, err := a.sides(ctx, m)
	if err != nil {
		return workflows.RecoverSourceResult{}, err
	}
	return a.recreateStream(ctx, m, fe, names, streamEnds{pub: s.dst, sub: s.src, pubSet: s.dstSet, pubShard: m.Spec.Target, subShard: m.Spec.Source,
		slotWhat: "reverse slot", originWhat: "reverse origin", pubWhat: "new owner", log: "new owner failed over: reverse slot created again"})
}
