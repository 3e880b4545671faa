package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// migrationRun is the parent workflow's state.
type migrationRun struct {
	req      MigrationRequest
	state    MigrationState
	children []workflow.ChildWorkflowFuture // by index of state.Moves
	started  []bool

	paused   bool
	throttle Throttle
	approved bool

	phaseVersion workflow.Version
}

// Migration plans a migration, publishes the migrating topology, runs one
// Move child per (source, target) pair in parallel and publishes the stable
// topology when they are done. Operators act on it through Updates, which it
// relays to the children.
func Migration(ctx workflow.Context, req MigrationRequest) (MigrationState, error) {
	r := &migrationRun{req: req, throttle: req.Throttle}
	r.state = MigrationState{Request: req, Phase: PhasePlan}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (MigrationState, error) { return r.state, nil }); err != nil {
		return r.state, err
	}
	if err := r.handlers(ctx); err != nil {
		return r.state, err
	}
	states := workflow.GetSignalChannel(ctx, SignalMoveState)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var ms MoveState
			states.Receive(ctx, &ms)
			r.moveState(ctx, ms)
		}
	})
	_ = workflow.UpsertTypedSearchAttributes(ctx, SAMigration.ValueSet(req.ID), SAPhase.ValueSet(string(PhasePlan)))
	r.details(ctx)

	err := r.run(ctx)
	if err != nil {
		r.state.Error = err.Error()
		r.setPhase(ctx, PhaseFailed)
	}
	if werr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); werr != nil && err == nil {
		err = werr
	}
	return r.state, err
}

func (r *migrationRun) run(ctx workflow.Context) error {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Minute,
		HeartbeatTimeout:    heartbeatTimeout(r.req),
		Summary:             "plan and preflight",
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second, MaximumAttempts: 5},
	})
	var plan PlanResult
	if err := workflow.ExecuteActivity(actx, ActivityPlan, r.req).Get(ctx, &plan); err != nil {
		return err
	}
	r.state.FromVersion = plan.FromVersion
	r.state.MovedFraction = plan.MovedFraction
	for _, mv := range plan.Moves {
		r.state.Moves = append(r.state.Moves, MoveState{Spec: mv, Phase: PhasePlan})
	}
	r.details(ctx)
	if r.req.DryRun {
		r.setPhase(ctx, PhaseDone)
		return nil
	}

	pub := PublishInput{Request: r.req, FromVersion: plan.FromVersion, Moves: plan.Moves}
	actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute, Summary: "publish the migrating topology",
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	if err := workflow.ExecuteActivity(actx, ActivityPublishMigrating, pub).Get(ctx, &r.state.Version); err != nil {
		return err
	}

	r.phaseVersion = workflow.GetVersion(ctx, "parent-phase-follows-moves", workflow.DefaultVersion, 1)
	r.children = make([]workflow.ChildWorkflowFuture, len(plan.Moves))
	r.started = make([]bool, len(plan.Moves))
	parent := workflow.GetInfo(ctx).WorkflowExecution.ID
	for i, mv := range plan.Moves {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:    MoveWorkflowID(MigrationWorkflowID(r.req.ID), mv.ID),
			TaskQueue:     TaskQueue,
			StaticSummary: fmt.Sprintf("move %s: %s → %s, %d ranges, ~%d rows", mv.ID, mv.Source, mv.Target, len(mv.Ranges), mv.EstRows),
		})
		in := MoveInput{Request: r.req, Spec: mv, ParentID: parent, FromVersion: plan.FromVersion}
		in.Request.Throttle = r.throttle
		r.children[i] = workflow.ExecuteChildWorkflow(cctx, MoveWorkflow, in)
		i := i
		workflow.Go(ctx, func(ctx workflow.Context) {
			if err := r.children[i].GetChildWorkflowExecution().Get(ctx, nil); err != nil {
				return
			}
			r.started[i] = true
			// Relay what operators said before the child existed.
			if r.paused {
				r.signal(ctx, i, MoveControl{Op: UpdatePause})
			}
			if r.approved {
				r.signal(ctx, i, MoveControl{Op: UpdateApprove})
			}
		})
	}
	if r.phaseVersion == workflow.DefaultVersion {
		r.setPhase(ctx, PhaseJoining)
	}

	var failed, rolledBack []string
	var firstErr error
	for i := range r.children {
		var ms MoveState
		err := r.children[i].Get(ctx, &ms)
		if err != nil {
			failed = append(failed, plan.Moves[i].ID)
			if firstErr == nil {
				firstErr = err
			}
			r.state.Moves[i].Phase = PhaseFailed
			r.state.Moves[i].Error = err.Error()
			continue
		}
		r.state.Moves[i] = ms
		if ms.Phase == PhaseRolledBack {
			rolledBack = append(rolledBack, ms.Spec.ID)
		}
	}
	r.details(ctx)
	if len(failed) > 0 {
		return fmt.Errorf("moves %s failed; the topology keeps their ranges migrating until they are resolved: %w", strings.Join(failed, ", "), firstErr)
	}
	pub.RolledBack = rolledBack
	actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute, Summary: "publish the stable topology",
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	if err := workflow.ExecuteActivity(actx, ActivityPublishStable, pub).Get(ctx, &r.state.Version); err != nil {
		return err
	}
	if len(rolledBack) == len(plan.Moves) {
		r.setPhase(ctx, PhaseRolledBack)
	} else {
		r.setPhase(ctx, PhaseDone)
	}
	return nil
}

// moveState records a child's report.
func (r *migrationRun) moveState(ctx workflow.Context, ms MoveState) {
	for i := range r.state.Moves {
		if r.state.Moves[i].Spec.ID == ms.Spec.ID {
			// Signals may overtake each other only across runs; keep the newest.
			if ms.UpdatedAt.Before(r.state.Moves[i].UpdatedAt) {
				return
			}
			r.state.Moves[i] = ms
		}
	}
	// The migration is where its least advanced move is, once the moves run.
	// (Before version 1 a placeholder PLAN move froze it at PLAN.)
	follow := r.state.Phase != PhasePlan
	if r.phaseVersion >= 1 {
		follow = r.children != nil
	}
	if p := r.aggregate(); follow && p != r.state.Phase && !r.state.Phase.Terminal() {
		r.setPhase(ctx, p)
	}
	r.details(ctx)
}

// aggregate is the phase of the least advanced move that is still running.
func (r *migrationRun) aggregate() Phase {
	best := -1
	for _, m := range r.state.Moves {
		if m.Phase.Terminal() {
			continue
		}
		if i := slices.Index(Phases, m.Phase); best < 0 || i < best {
			best = i
		}
	}
	if best < 0 {
		return r.state.Phase
	}
	return Phases[best]
}

func (r *migrationRun) setPhase(ctx workflow.Context, p Phase) {
	r.state.Phase = p
	_ = workflow.UpsertTypedSearchAttributes(ctx, SAPhase.ValueSet(string(p)))
	r.details(ctx)
}

func (r *migrationRun) details(ctx workflow.Context) {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s %s — %s\n\n", r.req.Kind, r.req.ID, r.state.Phase)
	if r.state.MovedFraction > 0 {
		fmt.Fprintf(&b, "moves %.1f%% of the token space; topology v%d → v%d\n\n", 100*r.state.MovedFraction, r.state.FromVersion, r.state.Version)
	}
	if r.paused {
		b.WriteString("**paused**\n\n")
	}
	if len(r.state.Moves) > 0 {
		b.WriteString(movesTable(r.state.Moves, workflow.Now(ctx)))
	}
	if r.state.Error != "" {
		fmt.Fprintf(&b, "\n**error:** %s\n", r.state.Error)
	}
	workflow.SetCurrentDetails(ctx, b.String())
}

// movesTable renders moves as the markdown table of the UI's current
// details.
func movesTable(moves []MoveState, now time.Time) string {
	var b strings.Builder
	b.WriteString("| move | source → target | ranges | phase | rows copied / est. | lag | verify | write pause |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, m := range moves {
		v := "—"
		if m.Verify != nil {
			v = m.Verify.Text(now)
		}
		wp := m.PauseText()
		if wp == "" {
			wp = "—"
		}
		phase := m.PhaseText()
		fmt.Fprintf(&b, "| %s | %s → %s | %d | %s | %d / %d | %d B | %s | %s |\n",
			m.Spec.ID, m.Spec.Source, m.Spec.Target, len(m.Spec.Ranges), phase, m.RowsCopied, m.Spec.EstRows, m.LagBytes, v, wp)
	}
	return b.String()
}

// signal relays an operator action to child i.
func (r *migrationRun) signal(ctx workflow.Context, i int, c MoveControl) error {
	return r.children[i].SignalChildWorkflow(ctx, SignalControl, c).Get(ctx, nil)
}

// relay sends c to every started child whose phase accepts it.
func (r *migrationRun) relay(ctx workflow.Context, c MoveControl, accept func(MoveState) bool) (int, error) {
	n := 0
	var errs []error
	for i := range r.children {
		if !r.started[i] || !accept(r.state.Moves[i]) {
			continue
		}
		if err := r.signal(ctx, i, c); err != nil {
			errs = append(errs, fmt.Errorf("move %s: %w", r.state.Moves[i].Spec.ID, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (r *migrationRun) phases() string {
	if len(r.state.Moves) == 0 {
		return "the migration is in " + string(r.state.Phase)
	}
	var parts []string
	for _, m := range r.state.Moves {
		parts = append(parts, m.Spec.ID+" "+string(m.Phase))
	}
	return "moves: " + strings.Join(parts, ", ")
}

func (r *migrationRun) any(f func(MoveState) bool) bool { return slices.ContainsFunc(r.state.Moves, f) }

func (r *migrationRun) count(f func(MoveState) bool) int {
	n := 0
	for _, m := range r.state.Moves {
		if f(m) {
			n++
		}
	}
	return n
}

func copying(m MoveState) bool {
	return m.Phase == PhasePlan || m.Phase == PhaseJoining || m.Phase == PhaseSnapshotCopy
}
func live(m MoveState) bool    { return !m.Phase.Terminal() }
func inGrace(m MoveState) bool { return m.Phase == PhaseGrace }
func verifyFailed(m MoveState) bool {
	return m.Phase == PhaseVerify && m.Verify != nil && !m.Verify.Passed
}
func awaitsApproval(m MoveState) bool {
	return (m.Phase == PhaseVerify && m.Verify != nil && m.Verify.Passed) || m.Phase == PhaseCutover
}
func canRollBack(m MoveState) bool { return m.Phase.CanRollBack() }
func stopped(m MoveState) bool     { return m.Stopped && !m.Phase.Terminal() }

// handlers registers the operator Updates. Validators reject what makes no
// sense in the current phase, with the phases in the message.
func (r *migrationRun) handlers(ctx workflow.Context) error {
	type handler struct {
		name     string
		validate func() error
		apply    func(ctx workflow.Context) (string, error)
	}
	terminal := func() error {
		if r.state.Phase.Terminal() {
			return fmt.Errorf("migration %s has ended (%s)", r.req.ID, r.state.Phase)
		}
		return nil
	}
	hs := []handler{
		{UpdatePause, func() error {
			if err := terminal(); err != nil {
				return err
			}
			if r.paused {
				return errors.New("already paused")
			}
			if r.state.Phase != PhasePlan && !r.any(copying) {
				return fmt.Errorf("pause stops the snapshot copy, and no move is copying any more (%s)", r.phases())
			}
			return nil
		}, func(ctx workflow.Context) (string, error) {
			r.paused = true
			r.details(ctx)
			n, err := r.relay(ctx, MoveControl{Op: UpdatePause}, copying)
			return fmt.Sprintf("paused (%d moves copying)", n), err
		}},
		{UpdateResume, func() error {
			if err := terminal(); err != nil {
				return err
			}
			if !r.paused && !r.any(stopped) {
				return errors.New("not paused, and no move is stopped by an error")
			}
			return nil
		}, func(ctx workflow.Context) (string, error) {
			retried := r.count(stopped)
			r.paused = false
			r.details(ctx)
			n, err := r.relay(ctx, MoveControl{Op: UpdateResume}, live)
			if retried > 0 {
				return fmt.Sprintf("resumed (%d moves; %d stopped moves run their phase again)", n, retried), err
			}
			return fmt.Sprintf("resumed (%d moves)", n), err
		}},
		{UpdateApprove, func() error {
			if err := terminal(); err != nil {
				return err
			}
			if !r.req.RequireApproval {
				return errors.New("this migration was not started with require-approval: its cutovers need no approval")
			}
			if r.approved {
				return errors.New("cutover already approved")
			}
			if !r.any(awaitsApproval) {
				return fmt.Errorf("approve-cutover is accepted when a move has passed VERIFY or waits in CUTOVER; %s", r.phases())
			}
			return nil
		}, func(ctx workflow.Context) (string, error) {
			r.approved = true
			n, err := r.relay(ctx, MoveControl{Op: UpdateApprove}, live)
			return fmt.Sprintf("cutover approved (%d moves)", n), err
		}},
		{UpdateRollback, func() error {
			if err := terminal(); err != nil {
				return err
			}
			if !r.any(canRollBack) {
				return fmt.Errorf("no move can be rolled back now (rollback is possible until GRACE ends; after CLEANUP it is a new migration); %s", r.phases())
			}
			return nil
		}, func(ctx workflow.Context) (string, error) {
			n, err := r.relay(ctx, MoveControl{Op: UpdateRollback}, canRollBack)
			return fmt.Sprintf("rolling back %d moves", n), err
		}},
		{UpdateComplete, func() error {
			if err := terminal(); err != nil {
				return err
			}
			if !r.any(inGrace) {
				return fmt.Errorf("complete ends GRACE early, and no move is in GRACE; %s", r.phases())
			}
			return nil
		}, func(ctx workflow.Context) (string, error) {
			n, err := r.relay(ctx, MoveControl{Op: UpdateComplete}, inGrace)
			return fmt.Sprintf("completing %d moves", n), err
		}},
		{UpdateReverify, func() error {
			if err := terminal(); err != nil {
				return err
			}
			if !r.any(verifyFailed) {
				return fmt.Errorf("reverify follows a failed verify, and no move has one; %s", r.phases())
			}
			return nil
		}, func(ctx workflow.Context) (string, error) {
			n, err := r.relay(ctx, MoveControl{Op: UpdateReverify}, verifyFailed)
			return fmt.Sprintf("re-verifying %d moves", n), err
		}},
	}
	for _, h := range hs {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, h.name,
			func(ctx workflow.Context) (string, error) { return h.apply(ctx) },
			workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context) error { return h.validate() }},
		); err != nil {
			return err
		}
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateThrottle,
		func(ctx workflow.Context, t Throttle) (string, error) {
			r.throttle = t
			r.state.Throttle = &t
			n, err := r.relay(ctx, MoveControl{Op: UpdateThrottle, Throttle: &t}, live)
			msg := fmt.Sprintf("throttle %.0f rows/s, %.0f bytes/s (0 = unlimited)", t.RowsPerSec, t.BytesPerSec)
			if t.ChunkRows > 0 {
				msg += fmt.Sprintf(", copy chunks of %d rows", t.ChunkRows)
			}
			return fmt.Sprintf("%s for %d moves", msg, n), err
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, t Throttle) error {
			if err := terminal(); err != nil {
				return err
			}
			if t.RowsPerSec < 0 || t.BytesPerSec < 0 {
				return errors.New("throttle limits must be >= 0 (0 = unlimited)")
			}
			if t.ChunkRows < 0 {
				return errors.New("copy chunk rows must be >= 0 (0 = the migration's --copy-chunk-rows)")
			}
			return nil
		}})
}
