package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Signals between the Migration workflow and its Move children. Operators
// talk to the parent (Updates); the parent relays to the children.
const (
	// SignalControl carries a MoveControl from the parent to a child.
	SignalControl = "control"
	// SignalMoveState carries a child's MoveState to the parent, on every
	// phase change and on copy progress (at most every progressEvery).
	SignalMoveState = "move-state"
)

// Search attributes (Keyword; registered by devenv).
var (
	SAPhase     = temporal.NewSearchAttributeKeyKeyword("ReshardPhase")
	SAMigration = temporal.NewSearchAttributeKeyKeyword("ReshardMigration")
	SASource    = temporal.NewSearchAttributeKeyKeyword("ReshardSource")
	SATarget    = temporal.NewSearchAttributeKeyKeyword("ReshardTarget")
)

const progressEvery = 10 * time.Second

// MoveControl is an operator action relayed to a move.
type MoveControl struct {
	Op       string    `json:"op"` // one of the Update* names
	Throttle *Throttle `json:"throttle,omitempty"`
}

// MoveInput is the input of the Move workflow.
type MoveInput struct {
	Request  MigrationRequest `json:"request"`
	Spec     MoveSpec         `json:"spec"`
	ParentID string           `json:"parent_id,omitempty"`
	// FromVersion is the topology version the migration was planned on.
	FromVersion int64 `json:"from_version,omitempty"`
	// Carry is the state a continued-as-new run picks up.
	Carry *MoveCarry `json:"carry,omitempty"`
	// MaxSlicesPerRun continues as new after this many copy slices even if
	// the server does not suggest it yet (tests; 0 = only when suggested).
	MaxSlicesPerRun int `json:"max_slices_per_run,omitempty"`
}

// MoveCarry is what a Move run hands to the next across continue-as-new.
type MoveCarry struct {
	State    MoveState `json:"state"`
	L0       string    `json:"l0"`
	Paused   bool      `json:"paused"`
	Throttle Throttle  `json:"throttle"`
	Approved bool      `json:"approved"`
	Runs     int       `json:"runs"`
	// VerifyRuns counts operator re-verifies (each a new verify run id).
	VerifyRuns int `json:"verify_runs"`
	// Recheck: the next verify re-checks its run (a cutover was aborted).
	Recheck bool `json:"recheck,omitempty"`
	// Source is the server the move's slot was created on (MoveRef.Source).
	Source *SourceIdentity `json:"source,omitempty"`
	// RepairPending: the source failed over and the slot was created again
	// on its new primary; the moving ranges are repaired before the stream
	// starts from the new slot.
	RepairPending bool `json:"repair_pending,omitempty"`
	// ReverseStale: a repair wrote the target's moving ranges since the
	// reverse slot was last prepared; the next PrepareReverse makes it again.
	ReverseStale bool `json:"reverse_stale,omitempty"`
	// Target is the target server as last recorded (MoveRef.Target).
	Target *SourceIdentity `json:"target,omitempty"`
}

// errContinueAsNew unwinds the phase code to the continue-as-new point.
var errContinueAsNew = errors.New("continue as new")

// moveRun is one run of a Move workflow.
type moveRun struct {
	in    MoveInput
	ref   MoveRef
	state MoveState
	l0    string

	paused, approved                     bool
	throttle                             Throttle
	rollbackAsked, completeAsked, verify bool // verify: reverify asked
	retryAsked                           bool // resume of a stopped move
	recheck                              bool // the next verify re-checks its run (VerifyInput.Recheck)
	repairPending                        bool // MoveCarry.RepairPending
	reverseStale                         bool // MoveCarry.ReverseStale
	runs, slices, verifyRuns             int
	reverseL0                            string
	lastNotify                           time.Time

	// The forward stream's session: CDC runs in it from CDC_CATCH_UP to
	// the end of CUTOVER; verify and cutover run in it too.
	sessCtx   workflow.Context
	cdcCancel workflow.CancelFunc
	cdcFut    workflow.Future
	cdcStarts int
	// revFut is GRACE's reverse stream while it runs.
	revFut workflow.Future
	// cdcStartedAt is when the stream was last started, cdcFailures how
	// many times in a row it ended within cdcHealthyAfter of its start.
	cdcStartedAt time.Time
	cdcFailures  int
	// approvalWait is how long CUTOVER waited for approve (kept out of the
	// phase's duration metric).
	approvalWait time.Duration
	// cutSlice cancels the copy slice while one runs (copy): a pause or a
	// rollback takes effect at once, not when the slice ends.
	cutSlice workflow.CancelFunc
}

// Move drives one move through its phases.
func Move(ctx workflow.Context, in MoveInput) (MoveState, error) {
	m := &moveRun{in: in, throttle: in.Request.Throttle}
	req := in.Request
	m.ref = MoveRef{MigrationID: in.Request.ID, Spec: in.Spec, Tables: in.Request.Tables, FromVersion: in.FromVersion, Request: &req}
	if c := in.Carry; c != nil {
		m.state, m.l0, m.paused, m.throttle, m.approved, m.runs, m.verifyRuns = c.State, c.L0, c.Paused, c.Throttle, c.Approved, c.Runs+1, c.VerifyRuns
		m.recheck = c.Recheck
		m.ref.Source, m.repairPending, m.ref.Target = c.Source, c.RepairPending, c.Target
		m.reverseStale = c.ReverseStale
	} else {
		m.state = MoveState{Spec: in.Spec, Phase: PhasePlan}
		m.state.Timings = []PhaseTiming{{Phase: PhasePlan, Start: workflow.Now(ctx)}}
		m.state.UpdatedAt = workflow.Now(ctx)
	}
	m.state.Paused = m.paused
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (MoveState, error) { return m.state, nil }); err != nil {
		return m.state, err
	}
	if err := workflow.SetQueryHandler(ctx, QueryThrottle, func() (Throttle, error) { return m.throttle, nil }); err != nil {
		return m.state, err
	}
	ch := workflow.GetSignalChannel(ctx, SignalControl)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var c MoveControl
			ch.Receive(ctx, &c)
			m.control(ctx, c)
		}
	})
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		SAMigration.ValueSet(in.Request.ID), SASource.ValueSet(in.Spec.Source), SATarget.ValueSet(in.Spec.Target),
		SAPhase.ValueSet(string(m.state.Phase)))
	m.details(ctx)

	err := m.run(ctx)
	if errors.Is(err, errContinueAsNew) {
		return m.continueAsNew(ctx)
	}
	if ctx.Err() != nil && !m.state.Phase.Terminal() {
		// A cancellation requested of this workflow (the Temporal UI's
		// Request Cancellation, temporal workflow cancel, or the parent's
		// own cancellation) is a rollback: run on a context the
		// cancellation does not reach, so that nothing is left behind.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if workflow.GetVersion(dctx, versionCancelRollsBack, workflow.DefaultVersion, 1) >= 1 {
			ctx = dctx
			err = m.cancelled(ctx)
		}
	}
	m.stopCDC(ctx)
	if err != nil {
		m.state.Error = err.Error()
		if !m.state.Phase.Terminal() {
			_ = m.to(ctx, PhaseFailed)
		}
		m.notify(ctx, true)
		return m.state, err
	}
	if m.state.Phase == PhaseRolledBack && endsRolledBack(ctx) {
		return m.state, rolledBack("move "+m.in.Spec.ID, m.state)
	}
	return m.state, nil
}

// versionRollbackInPlan marks the runs in which a rollback reaches a move
// still in PLAN (the migration relays it, the move takes it).
const versionRollbackInPlan = "rollback-in-plan"

// versionCancelRollsBack marks the runs in which a cancellation of the
// workflow rolls the move (or the migration) back; before it a cancel
// ended the workflow FAILED with everything left in place.
const versionCancelRollsBack = "cancel-rolls-back"

// cancelled ends a move whose workflow was asked to cancel, as a rollback
// asked in its phase would: before its cutover the copy is dropped and the
// ranges stay with the old owner; cut over (GRACE, or a CUTOVER whose
// publish happened meanwhile) the cutover is reversed over the reverse
// stream; in CLEANUP, where a rollback is no longer possible, the cleanup
// is finished. ctx is not cancelled.
func (m *moveRun) cancelled(ctx workflow.Context) error {
	workflow.GetLogger(ctx).Warn("move cancelled: rolling it back", "move", m.in.Spec.ID, "phase", m.state.Phase)
	m.stopCDC(ctx)
	if m.revFut != nil { // the GRACE reverse stream, cancelled with the workflow: its slot takes one reader
		_ = m.revFut.Get(ctx, nil)
		m.revFut = nil
	}
	m.state.Stopped, m.state.Waiting, m.state.Error = false, "", ""
	m.rollbackAsked = true
	switch m.state.Phase {
	case PhasePlan:
		// Nothing of the move exists yet, but its ranges are migrating:
		// the rollback gives them back and records the move's end.
		return m.rollback(ctx)
	case PhaseCleanup, PhaseRollingBack:
		return m.run(ctx) // past the point of no return, or already undoing
	}
	if err := m.to(ctx, PhaseRollingBack); err != nil {
		return err
	}
	return m.run(ctx)
}

func (m *moveRun) control(ctx workflow.Context, c MoveControl) {
	switch c.Op {
	case UpdatePause:
		m.paused = true
		m.cut(ctx, "pause")
	case UpdateResume:
		m.paused = false
		if m.state.Stopped {
			m.retryAsked = true
		}
	case UpdateThrottle:
		if c.Throttle != nil {
			m.throttle = *c.Throttle
		}
	case UpdateApprove:
		m.approved = true
	case UpdateRollback:
		// In PLAN (its preflight running) too: join sees it and rolls back
		// before anything is created; before the version a rollback that
		// came in PLAN was dropped and the move went on to copy and cut
		// over.
		if m.state.Phase.CanRollBack() ||
			m.state.Phase == PhasePlan && workflow.GetVersion(ctx, versionRollbackInPlan, workflow.DefaultVersion, 1) >= 1 {
			m.rollbackAsked = true
			m.cut(ctx, "rollback")
		}
	case UpdateComplete:
		m.completeAsked = true
	case UpdateReverify:
		m.verify = true
		if v := m.state.Verify; v != nil && !v.Passed {
			// The failed result is history from now on: status and the UI
			// show the new verify running, not the old failure.
			m.state.Verify, m.state.Waiting = nil, ""
		}
	default:
		workflow.GetLogger(ctx).Warn("unknown control op", "op", c.Op)
		return
	}
	m.state.Paused = m.paused
	m.details(ctx)
	m.notify(ctx, true)
}

// versionPauseCutsSlice marks the runs in which a pause or a rollback
// cancels the running copy slice; before it they waited for the slice's end
// (up to CopySlice, 20 s by default).
const versionPauseCutsSlice = "pause-cuts-slice"

// cut cancels the running copy slice, if one runs, for a pause or a
// rollback (why). The copy resumes from its checkpoints: each chunk and
// its checkpoint commit in one target transaction, so a cut chunk is
// neither counted nor half written; a copy beside its stream ends between
// chunks instead (CopySlice), leaving no chunk for the stream to hold.
func (m *moveRun) cut(ctx workflow.Context, why string) {
	if m.cutSlice == nil || workflow.GetVersion(ctx, versionPauseCutsSlice, workflow.DefaultVersion, 1) < 1 {
		return
	}
	workflow.GetLogger(ctx).Info("cutting the copy slice", "move", m.in.Spec.ID, "for", why)
	m.cutSlice()
	m.cutSlice = nil
}

func (m *moveRun) run(ctx workflow.Context) error {
	for !m.state.Phase.Terminal() {
		var err error
		switch m.state.Phase {
		case PhasePlan:
			err = m.plan(ctx)
		case PhaseJoining:
			err = m.join(ctx)
		case PhaseSnapshotCopy:
			err = m.copy(ctx)
		case PhaseCDCCatchUp:
			err = m.catchUp(ctx)
		case PhaseVerify:
			err = m.verifyPhase(ctx)
		case PhaseCutover:
			err = m.cutover(ctx)
		case PhaseGrace:
			err = m.grace(ctx)
		case PhaseCleanup:
			err = m.cleanup(ctx)
		case PhaseRollingBack:
			err = m.rollback(ctx)
		default:
			err = fmt.Errorf("move %s: no handler for phase %s", m.in.Spec.ID, m.state.Phase)
		}
		if err != nil && m.sourceFailedOver(err) && workflow.GetVersion(ctx, versionSourceFailoverRecovers, workflow.DefaultVersion, 1) >= 1 {
			err = m.recoverSource(ctx, err)
		}
		if err != nil && m.stoppable(err) && workflow.GetVersion(ctx, "stop-for-operator", workflow.DefaultVersion, 1) >= 1 {
			err = m.stopForOperator(ctx, err)
		} else if err != nil && m.firing(err) && workflow.GetVersion(ctx, "stop-for-trigger", workflow.DefaultVersion, 1) >= 1 {
			err = m.stopForOperator(ctx, err)
		} else if err != nil && persisted(err) {
			// Only runs that retry by time (versionRetryByTime) make it.
			err = m.stopForOperator(ctx, err)
		} else if err != nil && wrongCluster(err) {
			// No version gate: no history recorded before the guard holds
			// this error.
			err = m.stopForOperator(ctx, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// versionSourceFailoverRecovers marks the runs in which a source failover
// in SNAPSHOT_COPY or CDC_CATCH_UP is recovered without the operator;
// before it the move stopped for a rollback.
const versionSourceFailoverRecovers = "source-failover-recovers"

// sourceFailedOver: err is a failover met in a phase that recovers from it
// by itself (SNAPSHOT_COPY, CDC_CATCH_UP, VERIFY: nothing is cut over, and
// the copy, the stream and the verify can start again from a new slot).
func (m *moveRun) sourceFailedOver(err error) bool {
	switch m.state.Phase {
	case PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify:
	default:
		return false
	}
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTypeFailedOver
}

// recoverSource recovers from a source failover: the move's slot is
// created again on the new primary (RecoverSource: its consistent point is
// the stream's new start, the new server what later activities compare
// with), and the moving ranges are repaired before the stream starts from
// it (catchUp, verifyPhase: a verify then starts a new run): the changes between the old slot's last confirmed position
// and the new slot's start may be missing on the target. The copy goes on
// from its checkpoints. When the activity finds the source did not fail
// over (a target's failover, say), cause stands.
func (m *moveRun) recoverSource(ctx workflow.Context, cause error) error {
	m.stopCDC(ctx)
	var rr RecoverSourceResult
	actx := m.waitOpts(ctx, "create the slot again on "+m.in.Spec.Source+"'s new primary", 30*time.Minute, 0)
	if err := m.execute(ctx, actx, RetrySetup, "creating the slot again", ActivityRecoverSource, m.ref, &rr); err != nil {
		return err
	}
	if rr.Source == nil {
		return cause
	}
	ev := FailoverEvent{Side: "source", Shard: m.in.Spec.Source, Phase: m.state.Phase, At: workflow.Now(ctx), ToTimeline: rr.Source.Timeline}
	if m.ref.Source != nil {
		ev.FromTimeline = m.ref.Source.Timeline
	}
	m.l0, m.ref.Source, m.repairPending = rr.L0, rr.Source, true
	if m.state.Verify != nil || m.state.Phase == PhaseVerify {
		m.verifyRuns++ // chunks verified before the failover are not taken on trust
	}
	m.state.Failovers = append(m.state.Failovers, ev)
	m.state.Error = ""
	workflow.GetLogger(ctx).Warn("source failed over: slot created again, repair pending", "move", m.in.Spec.ID, "phase", m.state.Phase, "event", ev.String(), "cause", rootMessage(cause))
	m.details(ctx)
	m.notify(ctx, true)
	return nil // the loop runs the phase again
}

// repairAfterFailover repairs the moving ranges (Repair: only the chunks
// that differ are rewritten) once the copy is done and before the stream
// starts from the new slot: the target then holds every row as the source
// had it at a point after the new slot's start, from which the stream
// replays every change.
func (m *moveRun) repairAfterFailover(ctx workflow.Context) error {
	var res RepairResult
	actx := m.waitOpts(ctx, "repair the moving ranges after "+m.in.Spec.Source+"'s failover", 24*time.Hour, 0)
	// Set before the activity: a repair that fails may have written some
	// chunks. Its writes carry no replication origin, so a reverse slot
	// made before them would have GRACE send them back over newer rows.
	m.reverseStale = true
	if err := m.execute(ctx, actx, RetryCopy, "the repair", ActivityRepair, RepairInput{Move: m.ref, Phase: m.state.Phase}, &res); err != nil {
		return err
	}
	m.repairPending = false
	if n := len(m.state.Failovers); n > 0 {
		e := &m.state.Failovers[n-1]
		e.Repaired, e.Chunks, e.ChunksRepaired, e.RowsCopied, e.RowsDeleted = true, res.Chunks, res.Repaired, res.RowsCopied, res.RowsDeleted
		workflow.GetLogger(ctx).Info("repaired after the source's failover", "move", m.in.Spec.ID, "event", e.String())
	}
	m.details(ctx)
	m.notify(ctx, true)
	return nil
}

// stoppable reports whether err stops the move for the operator instead of
// failing it: an error no retry can fix by itself (a primary-key collision
// with a row the target owns, a schema change, bad input met by an
// activity) in a phase before CUTOVER, where a rollback undoes everything.
func (m *moveRun) stoppable(err error) bool {
	switch m.state.Phase {
	case PhaseJoining, PhaseSnapshotCopy, PhaseCDCCatchUp, PhaseVerify:
	default:
		return false
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return false
	}
	switch appErr.Type() {
	case ErrTypeCollision, ErrTypeSchemaChange, ErrTypeBadInput, ErrTypeFailedOver, ErrTypeFiringTrigger:
		return true
	}
	return false
}

// firing reports a trigger that fires for reshard's writes met in CUTOVER
// (before the attempt: the reverse stream's preparation checks) or GRACE
// (the reverse stream's start): the phase did not write, so it can stop for
// the operator and run again on resume (ErrTypeFiringTrigger).
func (m *moveRun) firing(err error) bool {
	switch m.state.Phase {
	case PhaseCutover, PhaseGrace:
	default:
		return false
	}
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTypeFiringTrigger
}

// wrongCluster reports an activity refused by a worker of another cluster
// (ErrTypeWrongCluster), in any phase: that worker did nothing, so the move
// stops for the operator, who gives each cluster its own Temporal
// namespace and resumes (the phase runs again), instead of failing.
func wrongCluster(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTypeWrongCluster
}

// stopForOperator keeps a move that met err in its phase, with the cause
// and the two ways on in its state, until the operator resumes it (the
// phase starts again, after the cause was fixed) or rolls it back. A failed
// move would leave its slot retaining WAL on the source and its fences and
// rows on the target, with no workflow left to clean them up.
func (m *moveRun) stopForOperator(ctx workflow.Context, err error) error {
	m.stopCDC(ctx)
	m.state.Stopped = true
	m.state.Error = fmt.Sprintf("stopped in %s: %v. Once the cause is fixed, reshard resume %s runs %s again; reshard rollback %s undoes the move",
		m.state.Phase, rootMessage(err), m.in.Request.ID, m.state.Phase, m.in.Request.ID)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == ErrTypeFailedOver {
		// Resuming would stream from a new slot past the missing changes.
		m.state.Error = fmt.Sprintf("stopped in %s: %v. Resuming cannot bring the missing changes back and a slot recreated by hand would skip them: reshard rollback %s undoes the move (a source failover recovers by itself only in SNAPSHOT_COPY, CDC_CATCH_UP, VERIFY and CUTOVER before an attempt fences)",
			m.state.Phase, rootMessage(err), m.in.Request.ID)
	}
	workflow.GetLogger(ctx).Warn("move stopped for the operator", "move", m.in.Spec.ID, "phase", m.state.Phase, "error", err)
	m.details(ctx)
	m.notify(ctx, true)
	if err := workflow.Await(ctx, func() bool { return m.retryAsked || m.rollbackAsked }); err != nil {
		return err
	}
	m.retryAsked = false
	m.state.Stopped = false
	m.state.Error = ""
	m.details(ctx)
	m.notify(ctx, true)
	return nil // the loop runs the phase again, or, asked to, rolls back
}

// rootMessage is the message of the innermost application error in err,
// without the activity error wrapping it.
func rootMessage(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	return err.Error()
}

// to moves to the next phase through the one transition table.
func (m *moveRun) to(ctx workflow.Context, next Phase) error {
	if err := m.state.Phase.Next(next); err != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("move %s: %v", m.in.Spec.ID, err), "BadTransition", nil)
	}
	now := workflow.Now(ctx)
	if n := len(m.state.Timings); n > 0 && m.state.Timings[n-1].End.IsZero() {
		m.state.Timings[n-1].End = now
		d := now.Sub(m.state.Timings[n-1].Start)
		if m.state.Phase == PhaseCutover && m.approvalWait > 0 {
			// The wait for an operator's approval is not cutover work:
			// it is recorded under its own label.
			workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"phase": PhaseAwaitingApproval}).
				Timer(PhaseTimer).Record(m.approvalWait)
			d -= m.approvalWait
			m.approvalWait = 0
		}
		workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"phase": string(m.state.Phase)}).
			Timer(PhaseTimer).Record(d)
	}
	if !next.Terminal() {
		m.state.Timings = append(m.state.Timings, PhaseTiming{Phase: next, Start: now})
	}
	if next == PhaseVerify {
		// A verify starts (again, after an aborted cutover or a reverify):
		// an earlier result no longer describes the move.
		m.state.Verify = nil
	}
	workflow.GetLogger(ctx).Info("phase", "move", m.in.Spec.ID, "from", m.state.Phase, "phase", next)
	m.state.Phase = next
	m.state.UpdatedAt = now
	_ = workflow.UpsertTypedSearchAttributes(ctx, SAPhase.ValueSet(string(next)))
	m.details(ctx)
	m.notify(ctx, true)
	return nil
}

// notify sends the state to the parent: always when forced (phase changes,
// operator actions), else at most every progressEvery.
func (m *moveRun) notify(ctx workflow.Context, force bool) {
	if m.in.ParentID == "" {
		return
	}
	now := workflow.Now(ctx)
	if !force {
		every := progressEvery
		// The parent's history grows with every report: past the first
		// minutes of a phase, report at most ~50 times per phase.
		if workflow.GetVersion(ctx, "progress-backoff", workflow.DefaultVersion, 1) >= 1 {
			if n := len(m.state.Timings); n > 0 {
				every = max(every, now.Sub(m.state.Timings[n-1].Start)/50)
			}
		}
		if now.Sub(m.lastNotify) < every {
			return
		}
	}
	m.lastNotify = now
	m.state.UpdatedAt = now
	// Not waited for: a lost notification is repaired by the next one, and
	// the parent gets the final state as the child's result.
	workflow.SignalExternalWorkflow(ctx, m.in.ParentID, "", SignalMoveState, m.state)
}

func (m *moveRun) details(ctx workflow.Context) {
	d := "### move " + markdownEscape(m.in.Spec.ID) + "\n\n" + asOf(workflow.Now(ctx), m.in.Request.WithDefaults().CopySlice) +
		"\nthrottle: " + markdownEscape(m.throttle.Text()) + "\n\n" + movesTable([]MoveState{m.state}, m.throttle, workflow.Now(ctx))
	for _, e := range m.state.Failovers {
		d += "\n- " + markdownEscape(e.String())
	}
	workflow.SetCurrentDetails(ctx, d)
}

// opts are the activity options of a phase; long activities heartbeat.
func (m *moveRun) opts(ctx workflow.Context, summary string, startToClose time.Duration, attempts int32) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: startToClose,
		HeartbeatTimeout:    heartbeatTimeout(m.in.Request),
		Summary:             summary,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: attempts,
		},
	})
}

// waitOpts are opts for an activity that writes to a shard outside the
// stream's session (join, copy, reverse slot, drop of the forward slot,
// cleanup, rollback): a cancellation of the workflow waits until the
// activity has stopped (it hears of it at its next heartbeat), so that the
// rollback the cancel runs next never races it (a copy slice still
// committing chunks after the rollback deleted the copy left rows on the
// target). Client-side only: no command changes, and no recorded history
// cancels these activities.
func (m *moveRun) waitOpts(ctx workflow.Context, summary string, startToClose time.Duration, attempts int32) workflow.Context {
	return workflow.WithWaitForCancellation(m.opts(ctx, summary, startToClose, attempts), true)
}

func heartbeatTimeout(r MigrationRequest) time.Duration { return r.WithDefaults().HeartbeatTimeout }

func (m *moveRun) plan(ctx workflow.Context) error {
	actx := m.opts(ctx, "preflight "+m.in.Spec.Source+" → "+m.in.Spec.Target, 5*time.Minute, 5)
	if err := m.execute(ctx, actx, RetryChecks, "the preflight", ActivityPreflightMove, m.ref, nil); err != nil {
		return err
	}
	return m.to(ctx, PhaseJoining)
}

func (m *moveRun) join(ctx workflow.Context) error {
	if m.rollbackAsked {
		return m.to(ctx, PhaseRollingBack)
	}
	var jr JoinResult
	actx := m.waitOpts(ctx, "fences, publication and slot", 30*time.Minute, 0)
	if err := m.execute(ctx, actx, RetrySetup, "JOINING", ActivityJoin, m.ref, &jr); err != nil {
		return err
	}
	m.l0 = jr.L0
	// Every later activity on the source compares the server with it: a
	// fresh worker after a failover reports it too.
	m.ref.Source = jr.Source
	m.ref.Target = jr.Target // a fresh worker's streams and copy compare the target with it
	return m.to(ctx, PhaseSnapshotCopy)
}

// versionStreamDuringCopy marks the runs that start the forward stream at
// the start of SNAPSHOT_COPY when the request asks for it
// (MigrationRequest.StreamDuringCopy); asked only then, so that recorded
// histories of other requests replay unchanged.
const versionStreamDuringCopy = "stream-during-copy"

// streamsDuringCopy: the forward stream runs beside this move's copy. Not
// after a source failover in the copy (repairPending): the repair runs
// with no stream, after the copy, and the new slot's stream then starts
// after it, as without the gate (recoverSource, catchUp).
func (m *moveRun) streamsDuringCopy(ctx workflow.Context) bool {
	if !m.in.Request.StreamDuringCopy ||
		workflow.GetVersion(ctx, versionStreamDuringCopy, workflow.DefaultVersion, 1) < 1 {
		return false
	}
	on := !m.repairPending
	if m.state.StreamDuringCopy && !on {
		workflow.GetLogger(ctx).Warn("source failed over during the copy: the stream starts again after the copy and its repair",
			"move", m.in.Spec.ID)
	}
	m.state.StreamDuringCopy = on
	return on
}

// copy runs SNAPSHOT_COPY as bounded slices, so that pause, throttle and
// progress belong to the workflow. With StreamDuringCopy the forward
// stream starts first, through the copy gate, and stays up across the
// slices (restarted in a new session if its worker dies); CDC_CATCH_UP
// goes on with the same stream.
func (m *moveRun) copy(ctx workflow.Context) error {
	gated := m.streamsDuringCopy(ctx)
	for !m.state.CopyDone {
		if m.rollbackAsked {
			return m.to(ctx, PhaseRollingBack)
		}
		if gated {
			if err := m.ensureCDC(ctx); err != nil {
				return err
			}
		}
		if m.paused {
			m.state.CopyEnd = time.Time{} // the rate before a pause says nothing of the end
			if err := workflow.Await(ctx, func() bool { return !m.paused || m.rollbackAsked }); err != nil {
				return err
			}
			continue
		}
		if m.slices > 0 && (workflow.GetInfo(ctx).GetContinueAsNewSuggested() ||
			(m.in.MaxSlicesPerRun > 0 && m.slices >= m.in.MaxSlicesPerRun)) {
			return errContinueAsNew
		}
		slice := m.in.Request.WithDefaults().CopySlice
		in := CopySliceInput{Move: m.ref, ChunkRows: m.in.Request.ChunkRows, Throttle: m.throttle, MaxTime: slice, Adaptive: m.state.Adaptive,
			StreamDuringCopy: m.in.Request.StreamDuringCopy}
		var p CopyProgress
		// A pause or a rollback cancels the slice (cut); waitOpts: its
		// future resolves once the activity has stopped writing.
		sctx, cancel := workflow.WithCancel(ctx)
		m.cutSlice = cancel
		actx := m.waitOpts(sctx, fmt.Sprintf("copy slice (%s)", slice), slice+5*time.Minute, 0)
		err := m.execute(sctx, actx, RetryCopy, "the copy", ActivityCopySlice, in, &p)
		m.cutSlice = nil
		wasCut := sctx.Err() != nil && ctx.Err() == nil
		cancel() // done: no command, the activity has ended
		var canceled *temporal.CanceledError
		if err != nil && wasCut && errors.As(err, &canceled) {
			// Cut: what the slice committed is in its checkpoints, and
			// the activity reports it (CopySlice) when it could read them.
			p = CopyProgress{}
			if !canceled.HasDetails() || canceled.Details(&p) != nil {
				m.slices++
				continue // the next slice reports it
			}
			p.Done, p.CopyEnd = false, time.Time{}
			err = nil
		}
		if err != nil {
			return err
		}
		m.slices++
		m.state.RowsCopied = p.Rows
		m.state.BytesCopied += p.Bytes
		m.state.CopyDone = p.Done
		m.state.Adaptive = p.Adaptive
		if p.Failover != "" {
			m.state.Failover = p.Failover
		}
		if p.Target != nil {
			m.ref.Target = p.Target
		}
		if !p.CopyEnd.IsZero() || p.Done {
			m.state.CopyEnd = p.CopyEnd // a slice too short to estimate keeps the last estimate
		}
		if gated { // the stream's lag, for status and the UI
			if _, _, err := m.lag(ctx); err != nil {
				return err
			}
		}
		m.details(ctx)
		m.notify(ctx, wasCut) // a cut slice: status shows where the pause or rollback stopped the copy
	}
	// The copy's baselines stay for verify and cleanup; its rate and
	// reason were the copy's.
	if a := m.state.Adaptive; a != nil {
		m.state.Adaptive = &AdaptiveStatus{SourceBaseline: a.SourceBaseline, TargetBaseline: a.TargetBaseline, BaselineAt: a.BaselineAt}
	}
	return m.to(ctx, PhaseCDCCatchUp)
}

// continueAsNew hands the state to a fresh run once the handlers are done.
func (m *moveRun) continueAsNew(ctx workflow.Context) (MoveState, error) {
	m.stopCDC(ctx)
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return m.state, err
	}
	in := m.in
	in.Carry = &MoveCarry{State: m.state, L0: m.l0, Paused: m.paused, Throttle: m.throttle, Approved: m.approved, Runs: m.runs, VerifyRuns: m.verifyRuns, Recheck: m.recheck, Source: m.ref.Source, RepairPending: m.repairPending, ReverseStale: m.reverseStale, Target: m.ref.Target}
	return m.state, workflow.NewContinueAsNewError(ctx, MoveWorkflow, in)
}

// ensureCDC keeps the forward stream running in a live session: after a
// failed session (its worker died) or a stopped stream it opens a new
// session and starts the stream again; it resumes from the target's
// replication origin.
func (m *moveRun) ensureCDC(ctx workflow.Context) error {
	if m.sessCtx != nil && !m.sessionBroken() {
		return nil
	}
	if m.cdcFut != nil && m.cdcFut.IsReady() {
		err := m.cdcFut.Get(ctx, nil)
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.NonRetryable() {
			return fmt.Errorf("CDC of move %s stopped: %w", m.in.Spec.ID, err)
		}
		workflow.GetLogger(ctx).Warn("CDC stream ended; restarting it in a new session", "move", m.in.Spec.ID, "error", err)
	}
	m.stopCDC(ctx)
	if m.cdcStarts > 0 {
		delay := min(time.Duration(m.cdcStarts)*2*time.Second, 30*time.Second)
		if workflow.GetVersion(ctx, "cdc-restart-at-once", workflow.DefaultVersion, 1) >= 1 {
			// A stream that ran a while before it ended (its source
			// restarted, its worker died) is restarted at once: a cutover
			// may be waiting for it. Only a stream that keeps failing
			// right after its start backs off, not to spin against a dead
			// or refusing server.
			if workflow.Now(ctx).Sub(m.cdcStartedAt) >= cdcHealthyAfter {
				m.cdcFailures = 0
			}
			delay = min(time.Duration(m.cdcFailures)*2*time.Second, 30*time.Second)
			m.cdcFailures++
		}
		if delay > 0 {
			if err := workflow.Sleep(ctx, delay); err != nil {
				return err
			}
		}
	}
	hb := heartbeatTimeout(m.in.Request)
	var sctx workflow.Context
	for try := 1; ; try++ {
		var err error
		sctx, err = workflow.CreateSession(ctx, &workflow.SessionOptions{
			CreationTimeout: 10 * time.Minute, ExecutionTimeout: 7 * 24 * time.Hour, HeartbeatTimeout: hb,
		})
		if err == nil {
			break
		}
		// The worker creating the session died meanwhile (its creation
		// heartbeat timed out): another worker creates it. Only a
		// cancelled workflow or a session no worker creates for long is
		// an error.
		if ctx.Err() != nil || try >= 30 || workflow.GetVersion(ctx, "retry-session-creation", workflow.DefaultVersion, 1) < 1 {
			return fmt.Errorf("create the CDC session of move %s: %w", m.in.Spec.ID, err)
		}
		workflow.GetLogger(ctx).Warn("creating the CDC session failed; trying again", "move", m.in.Spec.ID, "try", try, "error", err)
		if err := workflow.Sleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
	m.sessCtx = sctx
	cctx, cancel := workflow.WithCancel(sctx)
	m.cdcCancel = cancel
	actx := workflow.WithActivityOptions(cctx, workflow.ActivityOptions{
		StartToCloseTimeout: 7 * 24 * time.Hour,
		HeartbeatTimeout:    hb,
		Summary:             "CDC " + m.in.Spec.Source + " → " + m.in.Spec.Target,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1}, // restarted by ensureCDC, in a new session if need be
		WaitForCancellation: true,
	})
	// Named for the phase activities next to it (MoveRef.Stream): unique
	// across runs and attempts, so that the end of an earlier stream is
	// never taken for this one's.
	m.ref.Stream = fmt.Sprintf("%s#%d", workflow.GetInfo(ctx).WorkflowExecution.RunID, m.cdcStarts+1)
	m.cdcFut = workflow.ExecuteActivity(actx, ActivityRunCDC, CDCInput{Move: m.ref, L0: m.l0, Phase: m.state.Phase,
		CopyGate: m.in.Request.StreamDuringCopy})
	m.cdcStarts++
	m.cdcStartedAt = workflow.Now(ctx)
	return nil
}

// cdcHealthyAfter: a stream that ran this long before it ended was healthy;
// the next one starts without a backoff.
const cdcHealthyAfter = 30 * time.Second

func (m *moveRun) sessionBroken() bool {
	if m.cdcFut != nil && m.cdcFut.IsReady() {
		return true
	}
	info := workflow.GetSessionInfo(m.sessCtx)
	return info == nil || info.SessionState == workflow.SessionStateFailed
}

// stopCDC cancels the stream, waits until it has stopped (so that its slot
// is free) and closes its session.
func (m *moveRun) stopCDC(ctx workflow.Context) {
	if m.cdcCancel != nil {
		m.cdcCancel()
		m.cdcCancel = nil
		if m.cdcFut != nil {
			_ = m.cdcFut.Get(ctx, nil)
		}
	}
	if m.sessCtx != nil {
		workflow.CompleteSession(m.sessCtx)
		m.sessCtx = nil
	}
	m.cdcFut = nil
}

// inSession runs a phase activity next to the stream. If the session broke
// meanwhile (worker died), it restarts the stream in a new session and
// runs the activity again.
func (m *moveRun) inSession(ctx workflow.Context, name, summary string, timeout time.Duration, in, out any) error {
	byTime := retriedByTime(ctx)
	var p persistence // a transient error, retried until it persisted RetryPhase
	for attempt := 1; ; attempt++ {
		if err := m.ensureCDC(ctx); err != nil {
			return err
		}
		in = m.withStream(in)
		actx := m.opts(m.sessCtx, summary, timeout, 5)
		if byTime {
			actx = workflow.WithRetryPolicy(actx, retryRound)
		}
		err := workflow.ExecuteActivity(actx, name, in).Get(ctx, out)
		if err == nil {
			return nil
		}
		var appErr *temporal.ApplicationError
		isApp := errors.As(err, &appErr)
		noStream := isApp && appErr.Type() == ErrTypeNoStream
		// An activity that ran and gave its verdict (an aborted cutover, a
		// failed verify) is not run again because the stream ended
		// meanwhile: the caller acts on the verdict, and the stream is
		// restarted by the next activity that needs it.
		if isApp && appErr.NonRetryable() && !noStream &&
			workflow.GetVersion(ctx, "session-keeps-verdict", workflow.DefaultVersion, 1) >= 1 {
			return err
		}
		if m.sessionBroken() || errors.Is(err, workflow.ErrSessionFailed) || noStream {
			if attempt < 50 {
				workflow.GetLogger(ctx).Warn("session lost; retrying in a new one", "move", m.in.Spec.ID, "activity", name, "error", err)
				continue
			}
		}
		if byTime && transient(err) && ctx.Err() == nil {
			if err := m.retryAfter(ctx, &p, RetryPhase, summary, err); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// withStream is a phase activity's input naming the stream ensureCDC just
// made sure of (MoveRef.Stream): the input was built before, and may name
// the stream that ended.
func (m *moveRun) withStream(in any) any {
	switch v := in.(type) {
	case MoveRef:
		v.Stream = m.ref.Stream
		return v
	case VerifyInput:
		v.Move.Stream = m.ref.Stream
		return v
	case CutoverInput:
		v.Move.Stream = m.ref.Stream
		return v
	}
	return in
}

// lag asks the session's stream for its lag (CDCStatus) and records it;
// changed: the lag or the failover it reports is new.
func (m *moveRun) lag(ctx workflow.Context) (CDCStatus, bool, error) {
	var st CDCStatus
	if err := m.inSession(ctx, ActivityCDCStatus, "CDC lag", time.Minute, m.ref, &st); err != nil {
		return st, false, err
	}
	m.state.LagAt = workflow.Now(ctx)
	if st.Target != nil {
		m.ref.Target = st.Target
	}
	changed := st.LagBytes != m.state.LagBytes || (st.Failover != "" && st.Failover != m.state.Failover)
	m.state.LagBytes = st.LagBytes
	if st.Failover != "" {
		m.state.Failover = st.Failover
	}
	return st, changed, nil
}

func (m *moveRun) catchUp(ctx workflow.Context) error {
	r := m.in.Request.WithDefaults()
	maxLag, poll := r.MaxLagBytes, r.PollInterval
	for {
		if m.rollbackAsked {
			return m.to(ctx, PhaseRollingBack)
		}
		if m.repairPending {
			if err := m.repairAfterFailover(ctx); err != nil {
				return err
			}
		}
		st, changed, err := m.lag(ctx)
		if err != nil {
			return err
		}
		if changed {
			m.details(ctx)
			m.notify(ctx, false)
		}
		if st.LagBytes <= maxLag {
			return m.to(ctx, PhaseVerify)
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return errContinueAsNew // a catch-up that never ends must not grow the history forever
		}
		if err := workflow.Sleep(ctx, poll); err != nil {
			return err
		}
	}
}

func (m *moveRun) verifyPhase(ctx workflow.Context) error {
	if m.rollbackAsked {
		return m.to(ctx, PhaseRollingBack)
	}
	if m.repairPending { // the source failed over in VERIFY: repaired before the stream starts again
		if err := m.repairAfterFailover(ctx); err != nil {
			return err
		}
	}
	in := VerifyInput{Move: m.ref, RunID: fmt.Sprintf("%s_v%d", m.in.Spec.ID, m.verifyRuns), RowsPerSec: m.throttle.RowsPerSec,
		Adaptive: m.throttle.Adaptive, Baseline: m.state.Adaptive, EstRows: m.state.RowsCopied, Recheck: m.recheck}
	var sum VerifySummary
	err := m.inSession(ctx, ActivityVerify, "verify at one LSN", 24*time.Hour, in, &sum)
	var appErr *temporal.ApplicationError
	if err != nil && errors.As(err, &appErr) && appErr.Type() == ErrTypeVerification {
		if appErr.HasDetails() {
			_ = appErr.Details(&sum)
		}
		sum.Passed = false
		m.state.Verify = &sum
		// A reverify can come as soon as the parent sees the wait: the
		// flag is cleared before that, not after the stream has stopped,
		// or a reverify received while it stops would be lost and the
		// move would wait forever.
		keepAsked := workflow.GetVersion(ctx, versionReverifyKept, workflow.DefaultVersion, 1) >= 1
		if keepAsked {
			m.verify = false
		}
		if m.in.Request.OnVerifyFail != VerifyFailRollback {
			m.state.Waiting = WaitVerdict
		}
		m.details(ctx)
		m.notify(ctx, true)
		if m.in.Request.OnVerifyFail == VerifyFailRollback {
			return m.to(ctx, PhaseRollingBack)
		}
		// While it waits for the verdict the stream is stopped: a repair
		// (reshard verify --repair) must be the only writer of the target's
		// moving ranges. Reverify starts it again, from the target's origin.
		if workflow.GetVersion(ctx, versionVerdictStopsStream, workflow.DefaultVersion, 1) >= 1 {
			m.stopCDC(ctx)
		}
		if !keepAsked {
			m.verify = false
		}
		if err := workflow.Await(ctx, func() bool { return m.rollbackAsked || m.verify }); err != nil {
			return err
		}
		m.state.Waiting = ""
		if m.rollbackAsked {
			return m.to(ctx, PhaseRollingBack)
		}
		m.verify = false
		m.verifyRuns++
		return m.to(ctx, PhaseVerify) // re-verify: a new run compares every chunk again
	}
	if err != nil {
		return err
	}
	sum.Passed = true
	m.state.Verify = &sum
	m.recheck = false
	if m.in.Request.RequireApproval && !m.approved {
		m.state.Waiting = WaitApproval
	}
	return m.to(ctx, PhaseCutover)
}

// versionFailoverAwaitingApproval marks the runs in which a source failover
// found while a move waits for its cutover's approval (no attempt made, no
// fence taken) takes the move back to CDC_CATCH_UP, which recovers it;
// before it the move stopped for the operator, and resume could not help.
const versionFailoverAwaitingApproval = "failover-awaiting-approval"

// failedOverAwaitingApproval: err, met by the wait for approval, is the
// source's failover (ErrTypeFailedOver).
func (m *moveRun) failedOverAwaitingApproval(err error) bool {
	var appErr *temporal.ApplicationError
	return m.state.Phase == PhaseCutover && errors.As(err, &appErr) && appErr.Type() == ErrTypeFailedOver
}

// versionVerdictStopsStream marks the runs whose stream stops while a
// failed verify waits for its verdict; before it the stream ran on, and a
// repair of the target would have raced it.
const versionVerdictStopsStream = "verdict-stops-stream"

// versionReverifyKept: a reverify received while the stream stops for the
// verdict is kept (the flag is cleared before the wait is shown).
const versionReverifyKept = "reverify-kept"

func (m *moveRun) cutover(ctx workflow.Context) error {
	if m.in.Request.RequireApproval && !m.approved {
		start := workflow.Now(ctx)
		if m.state.Waiting != WaitApproval {
			m.state.Waiting = WaitApproval
			m.details(ctx)
		}
		if err := m.awaitApproval(ctx); err != nil {
			if m.failedOverAwaitingApproval(err) {
				// Back to CDC_CATCH_UP, where the run loop recovers the
				// source; VERIFY and the wait for approval follow again.
				m.approvalWait += workflow.Now(ctx).Sub(start)
				m.state.Waiting = ""
				if terr := m.to(ctx, PhaseCDCCatchUp); terr != nil {
					return terr
				}
			}
			return err
		}
		m.approvalWait += workflow.Now(ctx).Sub(start)
	}
	m.state.Waiting = ""
	if m.rollbackAsked {
		return m.to(ctx, PhaseRollingBack)
	}
	var rev JoinResult
	actx := m.waitOpts(ctx, "reverse publication and slot on "+m.in.Spec.Target, 30*time.Minute, 0)
	ref := m.ref
	if m.reverseStale && workflow.GetVersion(ctx, versionReverseSlotAfterRepair, workflow.DefaultVersion, 1) >= 1 {
		ref.RecreateReverse = true
	}
	if err := m.execute(ctx, actx, RetrySetup, "the reverse slot", ActivityPrepareReverse, ref, &rev); err != nil {
		return err
	}
	m.reverseStale = false
	// Known from here: a rollback whose cutover attempt published meanwhile
	// (cancelled in the middle of it) reverses it over this slot.
	m.reverseL0 = rev.L0
	m.ref.Reverse = rev.Source
	m.state.Attempts++
	var res CutoverResult
	in := CutoverInput{Move: m.ref, Budget: m.in.Request.WithDefaults().CutoverBudget}
	err := m.inSession(ctx, ActivityCutover, fmt.Sprintf("cutover attempt %d", m.state.Attempts), 10*time.Minute, in, &res)
	if m.failedOverBeforeFence(err) && workflow.GetVersion(ctx, versionCutoverFailoverRecovers, workflow.DefaultVersion, 1) >= 1 {
		return m.recoverInCutover(ctx, err)
	}
	var appErr *temporal.ApplicationError
	if err != nil && errors.As(err, &appErr) && appErr.Type() == ErrTypeCutoverAborted {
		m.state.Error = appErr.Error()
		// The verify before the next attempt must vouch for the rows as they
		// are then: its run's chunks were compared before the changes made
		// since (the aborted attempt's among them). It re-checks the chunks
		// those changes touched, at a point without a slot, which the long
		// transaction that aborted the attempt does not hold up (a new run
		// through a slot's snapshot waited for it: 3ed165a).
		if workflow.GetVersion(ctx, "recheck-after-abort", workflow.DefaultVersion, 1) >= 1 {
			m.recheck = true
		}
		var aborted CutoverResult
		if appErr.HasDetails() && appErr.Details(&aborted) == nil {
			m.state.Pauses = aborted.Pauses
		}
		if err := m.to(ctx, PhaseCDCCatchUp); err != nil {
			return err
		}
		return workflow.Sleep(ctx, m.in.Request.WithDefaults().CutoverBackoff)
	}
	if err != nil {
		return err
	}
	m.state.Error = ""
	m.state.Version = res.Version
	m.state.WritePause, m.state.PauseSteps = res.WritePause, res.PauseSteps
	m.state.Pauses = res.Pauses
	if res.Failover != "" {
		m.state.Failover = res.Failover
	}
	m.stopCDC(ctx)
	sactx := m.waitOpts(ctx, "drop the forward slot", 10*time.Minute, 0)
	if err := m.execute(ctx, sactx, RetrySetup, "dropping the forward slot", ActivityStopForward, m.ref, nil); err != nil {
		return err
	}
	m.reverseL0 = rev.L0
	if g := m.in.Request.Grace(); g > 0 {
		m.state.GraceUntil = workflow.Now(ctx).Add(g)
	}
	return m.to(ctx, PhaseGrace)
}

// versionReverseSlotAfterRepair marks the runs in which the cutover
// attempt after a repair (repairAfterFailover) makes the reverse slot again
// (MoveRef.RecreateReverse) instead of keeping an earlier attempt's: the
// repair's writes on the target carry no replication origin, so GRACE's
// reverse stream from the old slot would write the repair's rows, the
// source's values of that moment, over the newer ones on the source.
const versionReverseSlotAfterRepair = "reverse-slot-after-repair"

// versionCutoverFailoverRecovers marks the runs in which a source failover
// met by a cutover attempt before it fenced anything is recovered as in
// CDC_CATCH_UP; before it the move FAILED in CUTOVER, its slot, fences and
// replication origin left behind.
const versionCutoverFailoverRecovers = "cutover-failover-recovers"

// failedOverBeforeFence: err, returned by a cutover attempt (the Cutover
// activity, or the restart of its session's stream before it ran), is a
// failover (ErrTypeFailedOver). Such an attempt fenced nothing: the
// activity meets the source's failover when it looks for the stream, before
// cutover.Run; a failover found inside the write pause aborts the attempt,
// source unfenced (ErrTypeCutoverAborted); and an abort that could not
// unfence the source returns no failover (activities' runError).
func (m *moveRun) failedOverBeforeFence(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTypeFailedOver
}

// recoverInCutover recovers the source's failover met by a cutover attempt
// that fenced nothing: the slot is created again on the new primary
// (recoverSource, the event recorded in CUTOVER, where it was found), and
// the move goes back to CDC_CATCH_UP, which repairs the moving ranges and
// streams from the new slot; a new verify run and the cutover follow. An
// approval given stays given (the attempt ran after it): the cutover is not
// asked again.
// When RecoverSource finds the source did not fail over (the target's
// failover), cause stands and the move fails, as before the version.
func (m *moveRun) recoverInCutover(ctx workflow.Context, cause error) error {
	if err := m.recoverSource(ctx, cause); err != nil {
		return err
	}
	m.state.Waiting = ""
	return m.to(ctx, PhaseCDCCatchUp)
}

// awaitApproval waits for approve-cutover or rollback. The stream keeps the
// target current meanwhile: if it ends, it is restarted; if it cannot be
// (a non-retryable end, e.g. DDL on the source, a collision), the move is
// stopped for the operator like a phase before it: its state says why and
// no longer that it waits for approval (an approval could not cut over a
// target the stream no longer keeps current, so it waits too), and resume
// restarts the stream and waits for approval again; rollback undoes it.
func (m *moveRun) awaitApproval(ctx workflow.Context) error {
	watch := workflow.GetVersion(ctx, "approval-watches-cdc", workflow.DefaultVersion, 1) >= 1
	resumable := workflow.GetVersion(ctx, "approval-stop-resumable", workflow.DefaultVersion, 1) >= 1
	stopped := false
	ended := func() bool { return watch && !stopped && m.cdcFut != nil && m.cdcFut.IsReady() }
	for {
		if err := workflow.Await(ctx, func() bool {
			if resumable && stopped {
				return m.rollbackAsked || m.retryAsked
			}
			return m.approved || m.rollbackAsked || ended()
		}); err != nil {
			return err
		}
		if m.rollbackAsked || (m.approved && !stopped) {
			return nil
		}
		if stopped && m.retryAsked { // resumed: the cause was fixed
			m.retryAsked = false
			stopped = false
			m.state.Stopped, m.state.Error, m.state.Waiting = false, "", WaitApproval
			m.details(ctx)
			m.notify(ctx, true)
			m.stopCDC(ctx) // the ended stream's session; ensureCDC starts a new one
		}
		if err := m.ensureCDC(ctx); err != nil {
			if m.failedOverAwaitingApproval(err) && workflow.GetVersion(ctx, versionFailoverAwaitingApproval, workflow.DefaultVersion, 1) >= 1 {
				return err // cutover takes the move back to CDC_CATCH_UP, which recovers
			}
			stopped = true
			m.state.Error = err.Error()
			if resumable {
				m.state.Stopped, m.state.Waiting = true, ""
				m.state.Error = fmt.Sprintf("stopped in %s before its first attempt: %v. Once the cause is fixed, reshard resume %s restarts the stream and waits for approval again; reshard rollback %s undoes the move",
					m.state.Phase, rootMessage(err), m.in.Request.ID, m.in.Request.ID)
			}
			m.details(ctx)
			m.notify(ctx, true)
		}
	}
}

// grace keeps the old owner current by reverse CDC until the grace period
// ends or an operator completes the move. A reverse stream that ends on a
// failover of the new owner (its slot gone with the promotion) is
// recovered (recoverReverse) and started again from the new slot, within
// the same grace period.
func (m *moveRun) grace(ctx workflow.Context) error {
	grace := m.in.Request.Grace()
	// No grace period: clean up right after the cutover, without starting
	// the reverse stream (CLEANUP drops its slot; a rollback asked during
	// the cutover reads the slot itself). Versioned: a request with a grace
	// of 0 or less written by hand started the stream and cancelled it.
	if grace <= 0 && workflow.GetVersion(ctx, "zero-grace-skips-reverse", workflow.DefaultVersion, 1) >= 1 {
		return m.endGrace(ctx)
	}
	until := workflow.Now(ctx).Add(grace)
	for {
		err := m.reverseUntil(ctx, until.Sub(workflow.Now(ctx)))
		if err == nil {
			return m.endGrace(ctx)
		}
		if !m.reverseFailedOver(ctx, err) {
			return err
		}
		if err := m.recoverReverse(ctx, err); err != nil {
			return err
		}
	}
}

// reverseUntil runs the reverse stream for at most d, or until an operator
// completes or rolls back the move; an error is the stream's own end.
func (m *moveRun) reverseUntil(ctx workflow.Context, d time.Duration) error {
	rctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	actx := workflow.WithActivityOptions(rctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * 24 * time.Hour,
		HeartbeatTimeout:    heartbeatTimeout(m.in.Request),
		Summary:             "reverse CDC " + m.in.Spec.Target + " → " + m.in.Spec.Source,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
		WaitForCancellation: true,
	})
	rev := workflow.ExecuteActivity(actx, ActivityRunReverse, CDCInput{Move: m.ref, L0: m.reverseL0, Reverse: true, Phase: m.state.Phase})
	m.revFut = rev
	defer func() { m.revFut = nil }()
	if _, err := workflow.AwaitWithTimeout(ctx, max(d, 0), func() bool { return m.completeAsked || m.rollbackAsked || rev.IsReady() }); err != nil {
		return err
	}
	if rev.IsReady() {
		if err := rev.Get(ctx, nil); err != nil {
			return fmt.Errorf("reverse CDC of move %s stopped: %w", m.in.Spec.ID, err)
		}
	}
	cancel()
	_ = rev.Get(ctx, nil) // wait until it has stopped (cancelled)
	return nil
}

// versionReverseFailoverRecovers marks the runs in which a failover of the
// new owner under GRACE's reverse stream (or a rollback's drain of it) is
// recovered without the operator; before it the move failed in GRACE, or
// its rollback retried forever on the lost reverse slot.
const versionReverseFailoverRecovers = "reverse-failover-recovers"

// reverseFailedOver: err is the new owner's failover, met by the reverse
// stream (GRACE) or a rollback's drain of it (ROLLING_BACK after GRACE).
func (m *moveRun) reverseFailedOver(ctx workflow.Context, err error) bool {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != ErrTypeFailedOver {
		return false
	}
	return workflow.GetVersion(ctx, versionReverseFailoverRecovers, workflow.DefaultVersion, 1) >= 1
}

// recoverReverse recovers the reverse direction from a failover of the new
// owner, the reverse stream's source, as recoverSource and
// repairAfterFailover do the forward one: RecoverReverse creates the
// reverse slot again on the new owner's new primary (its consistent point
// the reverse stream's new start, the server what later activities compare
// with), then the old owner's copy of the moving ranges is repaired from
// the new owner (Repair, Reverse: only the chunks that differ are
// rewritten), the reverse stream stopped. When the activity finds the new
// owner did not fail over, cause stands.
func (m *moveRun) recoverReverse(ctx workflow.Context, cause error) error {
	var rr RecoverSourceResult
	actx := m.waitOpts(ctx, "create the reverse slot again on "+m.in.Spec.Target+"'s new primary", 30*time.Minute, 0)
	if err := m.execute(ctx, actx, RetrySetup, "creating the reverse slot again", ActivityRecoverReverse, m.ref, &rr); err != nil {
		return err
	}
	if rr.Source == nil {
		return cause
	}
	ev := FailoverEvent{Side: "target", Shard: m.in.Spec.Target, Phase: m.state.Phase, At: workflow.Now(ctx), ToTimeline: rr.Source.Timeline}
	if m.ref.Reverse != nil {
		ev.FromTimeline = m.ref.Reverse.Timeline
	}
	m.reverseL0, m.ref.Reverse = rr.L0, rr.Source
	m.state.Failovers = append(m.state.Failovers, ev)
	workflow.GetLogger(ctx).Warn("new owner failed over under the reverse stream: reverse slot created again, repair of the old owner pending", "move", m.in.Spec.ID, "phase", m.state.Phase, "event", ev.String(), "cause", rootMessage(cause))
	m.details(ctx)
	m.notify(ctx, true)
	var res RepairResult
	ractx := m.waitOpts(ctx, "repair "+m.in.Spec.Source+"'s moving ranges from "+m.in.Spec.Target+" after its failover", 24*time.Hour, 0)
	if err := m.execute(ctx, ractx, RetryCopy, "the reverse repair", ActivityRepair, RepairInput{Move: m.ref, Reverse: true}, &res); err != nil {
		return err
	}
	e := &m.state.Failovers[len(m.state.Failovers)-1]
	e.Repaired, e.Chunks, e.ChunksRepaired, e.RowsCopied, e.RowsDeleted = true, res.Chunks, res.Repaired, res.RowsCopied, res.RowsDeleted
	workflow.GetLogger(ctx).Info("old owner repaired after the new owner's failover", "move", m.in.Spec.ID, "event", e.String())
	m.details(ctx)
	m.notify(ctx, true)
	return nil
}

// endGrace goes on to CLEANUP, or to ROLLING_BACK if an operator asked for
// a rollback and not for completion.
func (m *moveRun) endGrace(ctx workflow.Context) error {
	m.state.GraceUntil = time.Time{}
	if m.rollbackAsked && !m.completeAsked {
		return m.to(ctx, PhaseRollingBack)
	}
	return m.to(ctx, PhaseCleanup)
}

// verifyRunIDs are the verify runs this move made (their work rows go at
// the end).
func (m *moveRun) verifyRunIDs() []string {
	var ids []string
	for i := 0; i <= m.verifyRuns; i++ {
		ids = append(ids, fmt.Sprintf("%s_v%d", m.in.Spec.ID, i))
	}
	return ids
}

func (m *moveRun) cleanup(ctx workflow.Context) error {
	actx := m.waitOpts(ctx, "delete moved rows from "+m.in.Spec.Source, 24*time.Hour, 0)
	in := EndInput{Move: m.ref, VerifyRunIDs: m.verifyRunIDs(), Adaptive: m.throttle.Adaptive, Baseline: m.state.Adaptive}
	if err := m.execute(ctx, actx, RetryEnd, "CLEANUP", ActivityCleanup, in, nil); err != nil {
		return err
	}
	return m.to(ctx, PhaseDone)
}

func (m *moveRun) rollback(ctx workflow.Context) error {
	m.stopCDC(ctx)
	// ReverseL0 and Budget go with a rollback before GRACE too: a cutover
	// attempt cancelled in the middle may have published, and the
	// activity then reverses it.
	in := EndInput{Move: m.ref, VerifyRunIDs: m.verifyRunIDs(), Adaptive: m.throttle.Adaptive,
		ReverseL0: m.reverseL0, Budget: m.in.Request.WithDefaults().CutoverBudget}
	summary := "roll back: drop slot, delete copied rows"
	// A move that reached GRACE is cut over: its rollback is the reverse
	// cutover, over the reverse stream.
	if n := len(m.state.Timings); n >= 2 && m.state.Timings[n-2].Phase == PhaseGrace {
		in.Grace, in.ReverseL0, in.Budget = true, m.reverseL0, m.in.Request.WithDefaults().CutoverBudget
		summary = "roll back: reverse cutover, delete rows on the new owner"
	}
	var res CleanupResult
	for {
		actx := m.waitOpts(ctx, summary, 24*time.Hour, 0)
		err := m.execute(ctx, actx, RetryEnd, "the rollback", ActivityRollback, in, &res)
		if err == nil {
			break
		}
		// The new owner failed over before the reverse cutover began (its
		// reverse slot is gone): recovered as in GRACE, then the rollback
		// runs again from the new reverse slot.
		if !in.Grace || !m.reverseFailedOver(ctx, err) {
			return err
		}
		if err := m.recoverReverse(ctx, err); err != nil {
			return err
		}
		in.Move, in.ReverseL0 = m.ref, m.reverseL0
	}
	if res.Version > 0 {
		m.state.Version = res.Version
	}
	return m.to(ctx, PhaseRolledBack)
}
