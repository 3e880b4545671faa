package workflows

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// movesPerRun bounds the Move children one run of the parent starts. Each
// child adds to the parent's history: its start and end, its state reports
// and the workflow tasks they wake (about 20 to 50 events). Past this many
// moves, a run waits for its children and continues as new with the rest, so
// that no run's history nears the server's 10,240-event warning. A migration
// of up to movesPerRun moves starts them all at once, in one run, as before.
const movesPerRun = 128

// MigrationResume is what a run of the parent hands to the next when it
// continues as new (MigrationRequest.Resume): the plan's moves with their
// states so far, where to go on, and what operators said.
type MigrationResume struct {
	// Runs is the number of runs before this one.
	Runs          int         `json:"runs"`
	FromVersion   int64       `json:"from_version"`
	Version       int64       `json:"version"`
	MovedFraction float64     `json:"moved_fraction"`
	Moves         []MoveState `json:"moves"` // every move of the plan, in plan order
	// MovesGz holds Moves instead, as gzipped JSON, when the run that
	// continued wrote them compact (GetVersion "carry-compact-moves"): a
	// finished move's state is about 1.4 KB of JSON, mostly its phase
	// timings, and 1,000 of them neared Temporal's 2 MB payload limit.
	MovesGz []byte `json:"moves_gz,omitempty"`
	// Next is the first move no run has started.
	Next       int      `json:"next"`
	Failed     []string `json:"failed,omitempty"`
	FirstError string   `json:"first_error,omitempty"`
	RolledBack []string `json:"rolled_back,omitempty"`
	Paused     bool     `json:"paused,omitempty"`
	Approved   bool     `json:"approved,omitempty"`
	Throttle   Throttle `json:"throttle"`
}

// moves are the carried moves, from MovesGz when the run before wrote them
// compact, else from Moves.
func (res *MigrationResume) moves() ([]MoveState, error) {
	if res.MovesGz == nil {
		return res.Moves, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(res.MovesGz))
	if err != nil {
		return nil, fmt.Errorf("read the carried moves: %w", err)
	}
	var moves []MoveState
	if err := json.NewDecoder(zr).Decode(&moves); err != nil {
		return nil, fmt.Errorf("read the carried moves: %w", err)
	}
	return moves, nil
}

// packMoves is moves as MovesGz: JSON (the data converter's own encoding
// of them), gzipped. Both are deterministic for the same input. The default
// level: BestCompression took up to 0.7 s for 1,000 moves on a busy 2-CPU
// machine, inside the workflow task (the SDK calls 1 s a deadlock), for 4 %
// less.
func packMoves(moves []MoveState) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if err := json.NewEncoder(zw).Encode(moves); err != nil {
		return nil, fmt.Errorf("pack the carried moves: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("pack the carried moves: %w", err)
	}
	return buf.Bytes(), nil
}

// migrationRun is the parent workflow's state.
type migrationRun struct {
	req      MigrationRequest
	resume   *MigrationResume // set in a run continued from another
	state    MigrationState
	children []workflow.ChildWorkflowFuture // by index of state.Moves
	started  []bool
	// window is the moves this run starts, [window[0], window[1]); the
	// later ones wait for a later run (their state stays PLAN).
	window [2]int
	// skipped: moves never started, because a rollback was asked while
	// they waited for a slot (MaxParallelMoves, MaxMovesPerShard).
	skipped       []bool
	rollbackAsked bool

	// Outcomes of the moves so far, this run's and earlier runs'.
	failed, rolledBack []string
	firstErr           error

	paused   bool
	throttle Throttle
	approved bool

	phaseVersion workflow.Version
}

// Migration plans a migration, publishes the migrating topology, runs one
// Move child per (source, target) pair in parallel and publishes the stable
// topology when they are done. Operators act on it through Updates, which it
// relays to the children.
//
// A migration of more than movesPerRun moves starts them movesPerRun at a
// time, one batch per run: each run waits for its children, then continues
// as new with the states so far (MigrationRequest.Resume), so every run's
// history stays bounded.
func Migration(ctx workflow.Context, req MigrationRequest) (MigrationState, error) {
	r := &migrationRun{req: req, resume: req.Resume, throttle: req.Throttle}
	r.req.Resume = nil // children, activities and the state query see the request alone
	r.state = MigrationState{Request: r.req, Phase: PhasePlan}
	if res := r.resume; res != nil {
		r.state.Phase = PhaseJoining // until the first report: the moves run
		r.state.FromVersion, r.state.Version, r.state.MovedFraction = res.FromVersion, res.Version, res.MovedFraction
		moves, err := res.moves()
		if err != nil {
			return r.state, temporal.NewNonRetryableApplicationError(err.Error(), "BadResume", err)
		}
		r.state.Moves = moves
		r.paused, r.approved, r.throttle = res.Paused, res.Approved, res.Throttle
		r.failed, r.rolledBack = res.Failed, res.RolledBack
		if res.FirstError != "" {
			r.firstErr = errors.New(res.FirstError)
		}
	}
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
	if r.resume == nil {
		_ = workflow.UpsertTypedSearchAttributes(ctx, SAMigration.ValueSet(req.ID), SAPhase.ValueSet(string(PhasePlan)))
	}
	r.details(ctx)

	err := r.run(ctx)
	var can *workflow.ContinueAsNewError
	if ctx.Err() != nil && !errors.As(err, &can) && !r.state.Phase.Terminal() {
		// Cancelled (the Temporal UI's Request Cancellation, temporal
		// workflow cancel): a rollback. The moves' children were cancelled
		// with this workflow and roll back by themselves; the rest happens
		// on a context the cancellation does not reach.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if workflow.GetVersion(dctx, versionCancelRollsBack, workflow.DefaultVersion, 1) >= 1 {
			ctx = dctx
			err = r.cancelled(ctx)
		}
	}
	if err != nil && !errors.As(err, &can) {
		r.state.Error = err.Error()
		r.setPhase(ctx, PhaseFailed)
	}
	if werr := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); werr != nil && err == nil {
		err = werr
	}
	if err == nil && r.state.Phase == PhaseRolledBack && endsRolledBack(ctx) {
		err = rolledBack("migration "+req.ID, r.state)
	}
	return r.state, err
}

func (r *migrationRun) run(ctx workflow.Context) error {
	if res := r.resume; res != nil {
		r.phaseVersion = workflow.GetVersion(ctx, "parent-phase-follows-moves", workflow.DefaultVersion, 1)
		plan := PlanResult{FromVersion: res.FromVersion, MovedFraction: res.MovedFraction}
		for _, ms := range r.state.Moves { // the carried moves (res.moves)
			plan.Moves = append(plan.Moves, ms.Spec)
		}
		return r.runBatch(ctx, plan, res.Next, res.Runs)
	}
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
	// Not cancelled with the workflow: a cancel must know whether the
	// migrating topology was published, to give its ranges back.
	pctx, _ := workflow.NewDisconnectedContext(actx)
	if err := workflow.ExecuteActivity(pctx, ActivityPublishMigrating, pub).Get(ctx, &r.state.Version); err != nil {
		return err
	}

	r.phaseVersion = workflow.GetVersion(ctx, "parent-phase-follows-moves", workflow.DefaultVersion, 1)
	// Before version 1 every move started in this run, however many.
	if workflow.GetVersion(ctx, "parent-continue-as-new", workflow.DefaultVersion, 1) >= 1 {
		return r.runBatch(ctx, plan, 0, 0)
	}
	r.startMoves(ctx, plan, 0, len(plan.Moves))
	if r.phaseVersion == workflow.DefaultVersion {
		r.setPhase(ctx, PhaseJoining)
	}
	r.awaitMoves(ctx)
	return r.end(ctx, plan)
}

// runBatch starts the moves from `from` on, at most movesPerRun, and waits
// for them; with moves left, it continues as new (runs is the number of runs
// before this one), else it ends the migration.
func (r *migrationRun) runBatch(ctx workflow.Context, plan PlanResult, from, runs int) error {
	if ctx.Err() != nil {
		return ctx.Err() // cancelled before any move of this run started
	}
	to := min(len(plan.Moves), from+movesPerRun)
	r.startMoves(ctx, plan, from, to)
	if r.phaseVersion == workflow.DefaultVersion && r.resume == nil {
		r.setPhase(ctx, PhaseJoining)
	}
	r.awaitMoves(ctx)
	if to == len(plan.Moves) {
		return r.end(ctx, plan)
	}
	// Reports still queued would be lost with this run; a child's last one
	// repeats its result, which the state already holds.
	states := workflow.GetSignalChannel(ctx, SignalMoveState)
	for {
		var ms MoveState
		if !states.ReceiveAsync(&ms) {
			break
		}
		r.moveState(ctx, ms)
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	res := MigrationResume{Runs: runs + 1, FromVersion: plan.FromVersion, Version: r.state.Version, MovedFraction: plan.MovedFraction,
		Next: to, Failed: r.failed, RolledBack: r.rolledBack, Paused: r.paused, Approved: r.approved, Throttle: r.throttle}
	if workflow.GetVersion(ctx, "carry-compact-moves", workflow.DefaultVersion, 1) >= 1 {
		gz, err := packMoves(r.state.Moves)
		if err != nil {
			return err
		}
		res.MovesGz = gz
	} else {
		res.Moves = r.state.Moves
	}
	if r.firstErr != nil {
		res.FirstError = r.firstErr.Error()
	}
	next := r.req
	next.Resume = &res
	workflow.GetLogger(ctx).Info("migration continues as new", "migration", r.req.ID, "moves_done", to, "moves", len(plan.Moves), "run", runs+1)
	return workflow.NewContinueAsNewError(ctx, MigrationWorkflow, next)
}

// startMoves starts the Move children of moves [from, to): all at once, or
// as slots free up when the request bounds them (MaxParallelMoves,
// MaxMovesPerShard).
func (r *migrationRun) startMoves(ctx workflow.Context, plan PlanResult, from, to int) {
	r.window = [2]int{from, to}
	r.children = make([]workflow.ChildWorkflowFuture, len(plan.Moves))
	r.started = make([]bool, len(plan.Moves))
	r.skipped = make([]bool, len(plan.Moves))
	if r.req.MaxParallelMoves <= 0 && r.req.MaxMovesPerShard <= 0 {
		for i := from; i < to; i++ {
			r.startMove(ctx, plan, i)
		}
		return
	}
	for i := from; i < to; i++ {
		r.state.Moves[i].Waiting = WaitSlot
	}
	running, perShard := 0, map[string]int{}
	fits := func(i int) bool {
		mv := plan.Moves[i]
		return (r.req.MaxParallelMoves <= 0 || running < r.req.MaxParallelMoves) &&
			(r.req.MaxMovesPerShard <= 0 || (perShard[mv.Source] < r.req.MaxMovesPerShard && perShard[mv.Target] < r.req.MaxMovesPerShard))
	}
	queue := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		queue = append(queue, i)
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for len(queue) > 0 {
			next := -1
			if err := workflow.Await(ctx, func() bool {
				if r.rollbackAsked {
					return true
				}
				for _, i := range queue {
					if fits(i) {
						next = i
						return true
					}
				}
				return false
			}); err != nil {
				return
			}
			if r.rollbackAsked { // nothing to undo for a move never started
				for _, i := range queue {
					r.skipped[i] = true
				}
				return
			}
			queue = slices.DeleteFunc(queue, func(i int) bool { return i == next })
			mv := plan.Moves[next]
			running++
			perShard[mv.Source]++
			perShard[mv.Target]++
			r.state.Moves[next].Waiting = ""
			r.startMove(ctx, plan, next)
			r.details(ctx)
			child := r.children[next]
			workflow.Go(ctx, func(ctx workflow.Context) {
				_ = child.Get(ctx, nil)
				running--
				perShard[mv.Source]--
				perShard[mv.Target]--
			})
		}
	})
}

// startMove starts the Move child of move i.
func (r *migrationRun) startMove(ctx workflow.Context, plan PlanResult, i int) {
	parent := workflow.GetInfo(ctx).WorkflowExecution.ID
	{
		mv := plan.Moves[i]
		co := workflow.ChildWorkflowOptions{
			WorkflowID:    MoveWorkflowID(MigrationWorkflowID(r.req.ID), mv.ID),
			TaskQueue:     TaskQueue,
			StaticSummary: fmt.Sprintf("move %s: %s → %s, %d ranges, ~%d rows", mv.ID, mv.Source, mv.Target, len(mv.Ranges), mv.EstRows),
			// A cancelled migration waits for its moves to roll back before
			// it publishes the stable topology (and ends, which would
			// terminate them).
			WaitForCancellation: true,
		}
		// A Move's Details read "No details available": they say what the
		// move is. Versioned: the start command carries them.
		if workflow.GetVersion(ctx, "move-static-details", workflow.DefaultVersion, 1) >= 1 {
			co.StaticDetails = moveDetails(r.req, mv, r.throttle)
		}
		cctx := workflow.WithChildOptions(ctx, co)
		in := MoveInput{Request: r.req, Spec: mv, ParentID: parent, FromVersion: plan.FromVersion}
		in.Request.Throttle = r.throttle
		r.children[i] = workflow.ExecuteChildWorkflow(cctx, MoveWorkflow, in)
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
			// A rollback accepted while this child was starting was relayed
			// to the moves already started only: this one copied, cut over
			// and sat in GRACE ('rolling back 1 moves' of 2, in the operator
			// walk). Versioned: the signal is a new command.
			if r.rollbackAsked && workflow.GetVersion(ctx, "relay-rollback-to-starting-moves", workflow.DefaultVersion, 1) >= 1 {
				r.signal(ctx, i, MoveControl{Op: UpdateRollback})
			}
		})
	}
}

// moveDetails is the StaticDetails of a Move: what it moves, from where to
// where, of which migration, and how to act on it (through the migration).
func moveDetails(req MigrationRequest, mv MoveSpec, t Throttle) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### move %s of migration %s\n\n", markdownEscape(mv.ID), markdownEscape(req.ID))
	fmt.Fprintf(&b, "%s → %s: %d token range(s), about %d rows (%s) of keyspace %s.\n\n",
		markdownEscape(mv.Source), markdownEscape(mv.Target), len(mv.Ranges), mv.EstRows, HumanBytes(mv.EstBytes), markdownEscape(req.Tables.Name))
	var ranges []string
	for i, rg := range mv.Ranges {
		if i == 3 {
			ranges = append(ranges, fmt.Sprintf("and %d more", len(mv.Ranges)-3))
			break
		}
		ranges = append(ranges, rg.String())
	}
	fmt.Fprintf(&b, "Ranges (lo exclusive, hi inclusive): %s.\n\n", markdownEscape(strings.Join(ranges, ", ")))
	fmt.Fprintf(&b, "Throttle at the start: %s (the current details show the one in force).\n\n", markdownEscape(t.Text()))
	fmt.Fprintf(&b, "Operators act on the migration: reshard status %s, pause, resume, throttle, approve, reverify, rollback, complete.\n", markdownEscape(req.ID))
	return b.String()
}

// awaitMoves waits for the children this run started and records how each
// ended.
func (r *migrationRun) awaitMoves(ctx workflow.Context) {
	var skipped []int
	for i := r.window[0]; i < r.window[1]; i++ {
		if r.children[i] == nil { // queued for a slot
			_ = workflow.Await(ctx, func() bool { return r.children[i] != nil || r.skipped[i] })
		}
		if r.children[i] == nil {
			r.state.Moves[i].Phase, r.state.Moves[i].Waiting = PhaseRolledBack, ""
			r.rolledBack = append(r.rolledBack, r.state.Moves[i].Spec.ID)
			skipped = append(skipped, i)
			continue
		}
		var ms MoveState
		err := Outcome(r.children[i].Get(ctx, &ms), &ms)
		if err != nil {
			r.failed = append(r.failed, r.state.Moves[i].Spec.ID)
			if r.firstErr == nil {
				r.firstErr = err
			}
			r.state.Moves[i].Phase = PhaseFailed
			r.state.Moves[i].Error = err.Error()
			continue
		}
		r.state.Moves[i] = ms
		r.state.Version = max(r.state.Version, ms.Version)
		if ms.Phase == PhaseRolledBack {
			r.rolledBack = append(r.rolledBack, ms.Spec.ID)
		}
	}
	// A move never started (a rollback was asked while it waited for a
	// slot) still has its ranges migrating and no recorded end: the
	// Rollback activity gives them back and records it, else
	// reshard.moves lists it running for ever (and topology check reports
	// the migration). A cancelled run does this in cancelled.
	if len(skipped) > 0 && ctx.Err() == nil && workflow.GetVersion(ctx, "skipped-moves-end", workflow.DefaultVersion, 1) >= 1 {
		r.rollBackUnstarted(ctx, skipped)
	}
	r.details(ctx)
}

// rollBackUnstarted runs the Rollback activity of moves no child ran,
// which records their end; a move whose rollback fails is FAILED.
func (r *migrationRun) rollBackUnstarted(ctx workflow.Context, idx []int) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    heartbeatTimeout(r.req),
		Summary:             "roll back a move that never started",
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
	})
	futs := make([]workflow.Future, len(idx))
	for k, i := range idx {
		req := r.req
		ref := MoveRef{MigrationID: r.req.ID, Spec: r.state.Moves[i].Spec, Tables: r.req.Tables, FromVersion: r.state.FromVersion, Request: &req}
		futs[k] = workflow.ExecuteActivity(actx, ActivityRollback, EndInput{Move: ref})
	}
	for k, f := range futs {
		i := idx[k]
		id := r.state.Moves[i].Spec.ID
		if err := f.Get(ctx, nil); err != nil {
			r.state.Moves[i].Phase, r.state.Moves[i].Error = PhaseFailed, err.Error()
			r.rolledBack = slices.DeleteFunc(r.rolledBack, func(s string) bool { return s == id })
			r.failed = append(r.failed, id)
			if r.firstErr == nil {
				r.firstErr = err
			}
			continue
		}
		r.state.Moves[i].Phase, r.state.Moves[i].Waiting = PhaseRolledBack, ""
		if !slices.Contains(r.rolledBack, id) {
			r.rolledBack = append(r.rolledBack, id)
		}
	}
}

// cancelled ends a migration whose workflow was asked to cancel, as a
// rollback: the children this run started were cancelled with it and have
// rolled back (or, in CLEANUP, completed) by the time awaitMoves returned;
// the moves no child ran (left for a later run, queued for a slot, or none
// started yet) have their ranges given back by the Rollback activity, which
// records their end; then the stable topology is published. A migration
// cancelled before its migrating topology was published changed nothing.
// ctx is not cancelled.
func (r *migrationRun) cancelled(ctx workflow.Context) error {
	workflow.GetLogger(ctx).Warn("migration cancelled: rolling it back", "migration", r.req.ID, "phase", r.state.Phase)
	r.state.Error = ""
	plan := PlanResult{FromVersion: r.state.FromVersion, MovedFraction: r.state.MovedFraction}
	for _, ms := range r.state.Moves {
		plan.Moves = append(plan.Moves, ms.Spec)
	}
	if r.state.Version == 0 {
		r.setPhase(ctx, PhaseRolledBack)
		return nil
	}
	var idx []int
	for i, ms := range r.state.Moves {
		noChild := r.children == nil || r.children[i] == nil
		queued := r.children != nil && i >= r.window[0] && i < r.window[1]
		if noChild && (ms.Phase == PhasePlan || queued && ms.Phase == PhaseRolledBack) {
			idx = append(idx, i)
		}
	}
	r.rollBackUnstarted(ctx, idx)
	r.details(ctx)
	return r.end(ctx, plan)
}

// end publishes the stable topology once every move has ended.
func (r *migrationRun) end(ctx workflow.Context, plan PlanResult) error {
	if len(r.failed) > 0 {
		return fmt.Errorf("moves %s failed; the topology keeps their ranges migrating until they are resolved: %w", strings.Join(r.failed, ", "), r.firstErr)
	}
	pub := PublishInput{Request: r.req, FromVersion: plan.FromVersion, Moves: plan.Moves, RolledBack: r.rolledBack}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute, Summary: "publish the stable topology",
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
	if err := workflow.ExecuteActivity(actx, ActivityPublishStable, pub).Get(ctx, &r.state.Version); err != nil {
		return err
	}
	if len(r.rolledBack) == len(plan.Moves) {
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
			if r.approved && ms.Waiting == WaitApproval {
				// Made before the approval reached the move (every move
				// started gets it, and one started later gets it at its
				// start): status must not show the wait again.
				ms.Waiting = ""
			}
			r.state.Moves[i] = ms
			break
		}
	}
	r.state.Version = max(r.state.Version, ms.Version)
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

// aggregate is the phase of the least advanced move that is still running;
// moves left for a later run do not hold it at PLAN.
func (r *migrationRun) aggregate() Phase {
	best := -1
	for i, m := range r.state.Moves {
		if m.Phase.Terminal() || r.children != nil && i >= r.window[1] {
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
	fmt.Fprintf(&b, "### %s %s — %s\n\n", r.req.Kind, markdownEscape(r.req.ID), markdownEscape(string(r.state.Phase)))
	if h := r.state.Headline(); h != "" {
		b.WriteString(markdownEscape(h) + "\n\n")
	}
	b.WriteString(asOf(workflow.Now(ctx), r.req.WithDefaults().CopySlice) + "\n")
	fmt.Fprintf(&b, "throttle per move: %s\n\n", markdownEscape(r.state.ThrottleNow().Text()))
	if r.paused {
		b.WriteString("**paused**\n\n")
	}
	moves := r.state.Moves
	if len(moves) > movesPerRun {
		// A table of every move, drawn again on every report, would cost as
		// much as the migration has moves (1,000 rows a report stalled a
		// replay past the SDK's 1 s deadlock check): this run's moves, and
		// how many are in each phase.
		fmt.Fprintf(&b, "%d moves: %s; this run's %d below\n\n", len(moves), markdownEscape(phaseCounts(moves)), r.window[1]-r.window[0])
		moves = moves[r.window[0]:r.window[1]]
	}
	if len(moves) > 0 {
		b.WriteString(movesTable(moves, r.state.ThrottleNow(), workflow.Now(ctx)))
	}
	if r.state.Error != "" {
		fmt.Fprintf(&b, "\n**error:** %s\n", markdownEscape(r.state.Error))
	}
	workflow.SetCurrentDetails(ctx, b.String())
}

// asOf says when the current details were drawn and when they change, so
// that a figure in the UI is never taken for a live one: the workflow draws
// them at each copy slice's end, phase change, report and operator action,
// while reshard status and the Pending Activities tab read the activities'
// heartbeats (every second).
func asOf(now time.Time, slice time.Duration) string {
	// One short line near the top, not emphasis: the UI did not wrap an
	// emphasized line, and showed no paragraph after the moves' list.
	return fmt.Sprintf("figures as of %s UTC, redrawn per copy slice (%s) and phase; live: reshard status\n",
		now.UTC().Format("15:04:05"), slice)
}

// phaseCounts is "3 DONE, 125 SNAPSHOT_COPY, 872 PLAN", in phase order.
func phaseCounts(moves []MoveState) string {
	n := map[Phase]int{}
	for _, m := range moves {
		n[m.Phase]++
	}
	var parts []string
	for _, p := range Phases {
		if n[p] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[p], p))
		}
	}
	return strings.Join(parts, ", ")
}

// movesTable renders moves as the Markdown of the UI's current details: a
// list item per move with its figures in one line, and under it what the
// move waits for, why it stopped or failed and the verify's samples. Not a
// table: the UI (2.42) clips a table's row to one line of text, which cut
// "shard1 → shard5" and a lag's time in half and hid the underscores of
// add_k34mfz_m1 and SNAPSHOT_COPY (seen in the screenshots). Text from
// names and errors is escaped.
func movesTable(moves []MoveState, t Throttle, now time.Time) string {
	var b strings.Builder
	for _, m := range moves {
		var notes []string
		v := "—"
		if m.Verify != nil {
			v = m.Verify.Short()
			if full := m.Verify.Text(now); full != v {
				notes = append(notes, "verify: "+full)
			}
		} else if m.Phase == PhaseVerify {
			v = "running"
		}
		wp := m.PauseText()
		if wp == "" {
			wp = "—"
		} else if m.Pauses.Attempts > 1 {
			wp = fmt.Sprintf("%s (%d tries)", m.Pauses.Total.Round(time.Millisecond), m.Pauses.Attempts)
			notes = append(notes, "write pause: "+m.PauseText())
		}
		if sub := m.PhaseText(); sub != string(m.Phase) {
			notes = append(notes, sub)
		}
		if m.Error != "" {
			notes = append(notes, "error: "+m.Error)
		}
		eta := m.ETAText(t, now)
		if eta == "-" {
			eta = "—"
		}
		lag := m.LagText()
		if (m.Phase == PhaseVerify || m.Phase == PhaseCutover) && !m.LagAt.IsZero() {
			// The workflow measures the lag in CDC_CATCH_UP only: say when
			// (reshard status and the stream's heartbeat have it live).
			lag += " at " + m.LagAt.UTC().Format("15:04:05")
		}
		// Short lines: the UI cut a long item at the panel's edge once.
		fmt.Fprintf(&b, "- **%s** %s (%d ranges): **%s**\n  - rows copied %s · copy ETA %s · lag %s\n  - verify %s · write pause %s\n",
			markdownEscape(m.Spec.ID), markdownEscape(m.Spec.Source+" → "+m.Spec.Target), len(m.Spec.Ranges), markdownEscape(string(m.Phase)),
			markdownEscape(fmt.Sprintf("%d / %d", m.RowsCopied, m.Spec.EstRows)), markdownEscape(eta), markdownEscape(lag), markdownEscape(v), markdownEscape(wp))
		for _, n := range notes {
			b.WriteString("  - " + markdownEscape(n) + "\n")
		}
	}
	return b.String()
}

// markdownEscape escapes the characters Markdown reads as markup (a table's
// | included), so that names and messages show as they are.
func markdownEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune("\\`*_{}[]<>()#+!|~", r) {
			b.WriteByte('\\')
		}
		if r == '\n' {
			r = ' '
		}
		b.WriteRune(r)
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
	return !m.Stopped && ((m.Phase == PhaseVerify && m.Verify != nil && m.Verify.Passed) || m.Phase == PhaseCutover)
}
func canRollBack(m MoveState) bool { return m.Phase.CanRollBack() }

// rollbackTakes: a move a rollback reaches — one that can roll back, or one
// in PLAN (started, its preflight running, or about to start).
func rollbackTakes(m MoveState) bool { return canRollBack(m) || m.Phase == PhasePlan }
func stopped(m MoveState) bool       { return m.Stopped && !m.Phase.Terminal() }

// handlers registers the operator Updates, each a method (on*) with its
// validator method (validate*), which rejects what makes no sense in the current
// phase with the phases in the message.
func (r *migrationRun) handlers(ctx workflow.Context) error {
	for _, h := range []struct {
		name     string
		apply    func(workflow.Context) (string, error)
		validate func(workflow.Context) error
	}{
		{UpdatePause, r.onPause, r.validatePause},
		{UpdateResume, r.onResume, r.validateResume},
		{UpdateApprove, r.onApprove, r.validateApprove},
		{UpdateRollback, r.onRollback, r.validateRollback},
		{UpdateComplete, r.onComplete, r.validateComplete},
		{UpdateReverify, r.onReverify, r.validateReverify},
	} {
		if err := workflow.SetUpdateHandlerWithOptions(ctx, h.name, h.apply, workflow.UpdateHandlerOptions{Validator: h.validate}); err != nil {
			return err
		}
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateThrottle, r.onThrottle, workflow.UpdateHandlerOptions{Validator: r.validateThrottle})
}

// ended refuses every update once the migration has ended.
func (r *migrationRun) ended() error {
	if r.state.Phase.Terminal() {
		return fmt.Errorf("migration %s has ended (%s)", r.req.ID, r.state.Phase)
	}
	return nil
}

func (r *migrationRun) validatePause(workflow.Context) error {
	if err := r.ended(); err != nil {
		return err
	}
	if r.paused {
		return errors.New("already paused")
	}
	if r.state.Phase != PhasePlan && !r.any(copying) {
		return fmt.Errorf("pause stops the snapshot copy, and no move is copying any more (%s)", r.phases())
	}
	return nil
}

func (r *migrationRun) onPause(ctx workflow.Context) (string, error) {
	r.paused = true
	r.details(ctx)
	n, err := r.relay(ctx, MoveControl{Op: UpdatePause}, copying)
	return fmt.Sprintf("paused (%d moves copying)", n), err
}

func (r *migrationRun) validateResume(workflow.Context) error {
	if err := r.ended(); err != nil {
		return err
	}
	if !r.paused && !r.any(stopped) {
		return errors.New("not paused, and no move is stopped by an error")
	}
	return nil
}

func (r *migrationRun) onResume(ctx workflow.Context) (string, error) {
	retried := r.count(stopped)
	r.paused = false
	r.details(ctx)
	n, err := r.relay(ctx, MoveControl{Op: UpdateResume}, live)
	if retried > 0 {
		return fmt.Sprintf("resumed (%d moves; %d stopped moves run their phase again)", n, retried), err
	}
	return fmt.Sprintf("resumed (%d moves)", n), err
}

func (r *migrationRun) validateApprove(workflow.Context) error {
	if err := r.ended(); err != nil {
		return err
	}
	if !r.req.RequireApproval {
		return errors.New("this migration was not started with require-approval: its cutovers need no approval")
	}
	if r.approved {
		return errors.New("cutover already approved")
	}
	if !r.any(awaitsApproval) {
		return fmt.Errorf("approve-cutover is accepted when a move has passed VERIFY or waits in CUTOVER (a move stopped there needs reshard resume first); %s", r.phases())
	}
	return nil
}

func (r *migrationRun) onApprove(ctx workflow.Context) (string, error) {
	r.approved = true
	n, err := r.relay(ctx, MoveControl{Op: UpdateApprove}, live)
	// Shown at once, before the moves report: a move that got the approval
	// no longer waits for it. (Only what status shows changes here: no
	// decision of the migration reads Waiting.)
	if err == nil {
		for i := range r.state.Moves {
			if m := &r.state.Moves[i]; r.started[i] && m.Waiting == WaitApproval {
				m.Waiting = ""
			}
		}
		r.details(ctx)
	}
	return fmt.Sprintf("cutover approved (%d moves)", n), err
}

// whenAny refuses an update once the migration has ended, or while no move
// is as f asks (why says what the update needs, the phases follow).
func (r *migrationRun) whenAny(f func(MoveState) bool, why string) error {
	if err := r.ended(); err != nil {
		return err
	}
	if !r.any(f) {
		return fmt.Errorf("%s; %s", why, r.phases())
	}
	return nil
}

func (r *migrationRun) validateRollback(workflow.Context) error {
	return r.whenAny(rollbackTakes, "no move can be rolled back now (rollback is possible until GRACE ends; after CLEANUP it is a new migration)")
}

func (r *migrationRun) onRollback(ctx workflow.Context) (string, error) {
	r.rollbackAsked = true // moves still queued for a slot are not started
	accept := canRollBack
	if workflow.GetVersion(ctx, versionRollbackInPlan, workflow.DefaultVersion, 1) >= 1 {
		accept = rollbackTakes // a move in PLAN too: it went on to copy and cut over
	}
	n, err := r.relay(ctx, MoveControl{Op: UpdateRollback}, accept)
	return fmt.Sprintf("rolling back %d moves", n), err
}

func (r *migrationRun) validateComplete(workflow.Context) error {
	return r.whenAny(inGrace, "complete ends GRACE early, and no move is in GRACE")
}

func (r *migrationRun) onComplete(ctx workflow.Context) (string, error) {
	n, err := r.relay(ctx, MoveControl{Op: UpdateComplete}, inGrace)
	return fmt.Sprintf("completing %d moves", n), err
}

func (r *migrationRun) validateReverify(workflow.Context) error {
	return r.whenAny(verifyFailed, "reverify follows a failed verify, and no move has one")
}

func (r *migrationRun) onReverify(ctx workflow.Context) (string, error) {
	var asked []int
	for i, m := range r.state.Moves {
		if r.started[i] && verifyFailed(m) {
			asked = append(asked, i)
		}
	}
	n, err := r.relay(ctx, MoveControl{Op: UpdateReverify}, verifyFailed)
	// Shown at once, before the moves report: their failed results are
	// history (a move whose signal failed keeps its own).
	for _, i := range asked {
		if m := &r.state.Moves[i]; verifyFailed(*m) && err == nil {
			m.Verify, m.Waiting = nil, ""
		}
	}
	r.details(ctx)
	return fmt.Sprintf("re-verifying %d moves", n), err
}

func (r *migrationRun) validateThrottle(_ workflow.Context, t Throttle) error {
	if err := r.ended(); err != nil {
		return err
	}
	if t.RowsPerSec < 0 || t.BytesPerSec < 0 {
		return errors.New("throttle limits must be >= 0 (0 = unlimited)")
	}
	if t.ChunkRows < 0 {
		return errors.New("copy chunk rows must be >= 0 (0 = the migration's --copy-chunk-rows)")
	}
	return t.Adaptive.Validate()
}

func (r *migrationRun) onThrottle(ctx workflow.Context, t Throttle) (string, error) {
	if t.Adaptive == nil { // an update without adaptive limits keeps those in force
		t.Adaptive = r.throttle.Adaptive
	}
	if t.KeepRates {
		t.RowsPerSec, t.BytesPerSec, t.ChunkRows, t.KeepRates = r.throttle.RowsPerSec, r.throttle.BytesPerSec, r.throttle.ChunkRows, false
	}
	r.throttle = t
	r.state.Throttle = &t
	r.details(ctx) // the throttle in force, at once
	n, err := r.relay(ctx, MoveControl{Op: UpdateThrottle, Throttle: &t}, live)
	msg := fmt.Sprintf("throttle %.0f rows/s, %.0f bytes/s (0 = unlimited)", t.RowsPerSec, t.BytesPerSec)
	if t.ChunkRows > 0 {
		msg += fmt.Sprintf(", copy chunks of %d rows", t.ChunkRows)
	}
	if t.Adaptive.Enabled() {
		msg += ", adaptive: " + t.Adaptive.Text()
	}
	return fmt.Sprintf("%s for %d moves", msg, n), err
}
