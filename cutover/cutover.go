package cutover

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Step names the cutover steps, in order. The same strings are journaled,
// logged and shown to operators.
type Step string

const (
	StepGates         Step = "gates"          // copy done, verify passed, lag under threshold, approval
	StepFenceSource   Step = "fence-source"   // the write pause starts
	StepWaitInFlight  Step = "wait-in-flight" // transactions that may have passed the fence end
	StepMarker        Step = "marker"         // pg_logical_emit_message on the source
	StepDrain         Step = "drain"          // CDC applied up to the marker
	StepSequences     Step = "sequences"      // the target's owned sequences past every value it holds
	StepPublish       Step = "publish"        // topology v+1 (CAS): the point of no return
	StepUnfenceTarget Step = "unfence-target" // the write pause ends
	StepAbort         Step = "abort"          // source unfenced, cutover to be retried
	StepDone          Step = "done"
)

// Steps is the forward sequence.
var Steps = []Step{StepGates, StepFenceSource, StepWaitInFlight, StepMarker, StepDrain, StepSequences, StepPublish, StepUnfenceTarget}

// Actions are the side effects of a cutover, one method per step, so that the
// sequence is written once (Run) and can be executed for real (PG) or
// printed (DryRun). Every method must be idempotent: after a crash the
// sequence is resumed or undone by calling them again.
type Actions interface {
	Gates(ctx context.Context) error
	FenceSource(ctx context.Context) error
	WaitInFlight(ctx context.Context, budget time.Duration) error
	EmitMarker(ctx context.Context) (marker string, err error)
	Drain(ctx context.Context, marker string, budget time.Duration) error
	// AdvanceSequences sets the target's sequences owned by the moving
	// tables' columns past every value those columns hold there, after the
	// drain (every moved row is there) and before the unfence (no
	// application insert into the moved ranges drew a value yet).
	AdvanceSequences(ctx context.Context) error
	// Publish publishes topology v+1 with the ranges on the target.
	Publish(ctx context.Context) (version int64, err error)
	// Published reports whether the new topology is already published (to
	// resolve a publish whose outcome was lost, and to resume after a crash).
	Published(ctx context.Context) (bool, error)
	UnfenceTarget(ctx context.Context) error
	UnfenceSource(ctx context.Context) error
}

// Journal records the progress of a cutover durably (in the control
// database), so a crash between any two steps resumes or undoes it.
type Journal interface {
	Record(ctx context.Context, step Step, detail string) error
	// Last returns the last step recorded for this cutover ("" for none).
	Last(ctx context.Context) (Step, error)
}

// DefaultBudget is the write-pause budget of Options{} (the migration's
// default, workflows.DefaultCutoverBudget: cmd/reshard's TestKnobsAgree
// checks they agree).
const DefaultBudget = 2 * time.Second

// Options of one cutover attempt.
type Options struct {
	// Budget bounds the write pause (fence to unfence). Over it, the cutover
	// aborts by unfencing the source. 0: DefaultBudget.
	Budget time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// StepTiming is how long one step took.
type StepTiming struct {
	Step     Step          `json:"step"`
	Duration time.Duration `json:"duration"`
}

// Result of a cutover.
type Result struct {
	// WritePause is fence → unfence, the time writes to the moving ranges were
	// refused everywhere.
	WritePause time.Duration `json:"write_pause"`
	Version    int64         `json:"version"`
	Steps      []StepTiming  `json:"steps"`
}

// ErrAborted wraps the reason a cutover gave up before the point of no
// return; the source was unfenced and the cutover can be retried.
var ErrAborted = errors.New("cutover aborted before publish; the source owns the ranges again and the cutover can be retried")

// budgetSlack is how far past the budget a step before publish may run
// before its context ends it.
const budgetSlack = 500 * time.Millisecond

// Run executes one cutover attempt: gates → fence source → wait in-flight →
// marker → drain → sequences → publish → unfence target. Before publish, any failure or an
// exhausted budget aborts (unfence source) and returns an error wrapping
// ErrAborted. After publish the cutover only goes forward.
func Run(ctx context.Context, a Actions, j Journal, opts Options) (Result, error) {
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	var res Result
	timed := func(s Step, f func() error) error {
		t := now()
		err := f()
		res.Steps = append(res.Steps, StepTiming{Step: s, Duration: now().Sub(t)})
		if err != nil {
			return fmt.Errorf("cutover step %s: %w", s, err)
		}
		return nil
	}
	if err := timed(StepGates, func() error { return a.Gates(ctx) }); err != nil {
		return res, err // nothing was changed
	}
	// Journal before acting: after a crash, a "fence-source" record means the
	// source may be fenced and must be unfenced (or the cutover finished).
	if err := j.Record(ctx, StepFenceSource, ""); err != nil {
		return res, fmt.Errorf("journal cutover start: %w", err)
	}
	// The steps before publish run under the budget (plus a little slack,
	// so that a step that measures the budget itself reports why it ran
	// out): a source that stops answering (a network partition hangs a
	// connection instead of failing it) must not hold the fence longer.
	fctx, cancel := context.WithTimeout(ctx, opts.Budget+budgetSlack)
	defer cancel()
	if err := timed(StepFenceSource, func() error { return a.FenceSource(fctx) }); err != nil {
		return res, abort(ctx, a, j, err)
	}
	fenced := now()
	remaining := func() time.Duration { return opts.Budget - now().Sub(fenced) }
	pctx, pcancel := context.WithTimeout(ctx, opts.Budget+budgetSlack)
	defer pcancel()
	if err := timed(StepWaitInFlight, func() error { return a.WaitInFlight(pctx, remaining()) }); err != nil {
		return res, abort(ctx, a, j, err)
	}
	var marker string
	if err := timed(StepMarker, func() (err error) { marker, err = a.EmitMarker(pctx); return err }); err != nil {
		return res, abort(ctx, a, j, err)
	}
	if err := timed(StepDrain, func() error { return a.Drain(pctx, marker, remaining()) }); err != nil {
		return res, abort(ctx, a, j, err)
	}
	if err := timed(StepSequences, func() error { return a.AdvanceSequences(pctx) }); err != nil {
		return res, abort(ctx, a, j, err)
	}
	if remaining() <= 0 {
		return res, abort(ctx, a, j, fmt.Errorf("write-pause budget %s spent before publish", opts.Budget))
	}
	if err := j.Record(ctx, StepPublish, marker); err != nil {
		return res, abort(ctx, a, j, fmt.Errorf("journal publish: %w", err))
	}
	if err := timed(StepPublish, func() (err error) { res.Version, err = a.Publish(ctx); return err }); err != nil {
		// The outcome of a publish that failed on a lost connection is
		// unknown: ask the control database before deciding.
		pub, perr := a.Published(ctx)
		if perr != nil {
			return res, fmt.Errorf("publish outcome unknown (%v; checking it: %v): the cutover must be resumed, not retried", err, perr)
		}
		if !pub {
			return res, abort(ctx, a, j, err)
		}
	}
	if err := j.Record(ctx, StepUnfenceTarget, fmt.Sprint(res.Version)); err != nil {
		return res, fmt.Errorf("journal after publish (published; resume to finish): %w", err)
	}
	if err := timed(StepUnfenceTarget, func() error { return a.UnfenceTarget(ctx) }); err != nil {
		return res, fmt.Errorf("published, but (resume to finish): %w", err)
	}
	res.WritePause = now().Sub(fenced)
	if err := j.Record(ctx, StepDone, res.WritePause.String()); err != nil {
		return res, fmt.Errorf("journal done: %w", err)
	}
	return res, nil
}

func abort(ctx context.Context, a Actions, j Journal, cause error) error {
	// Unfencing must happen even if ctx was cancelled.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := unfenceSource(ctx, a); err != nil {
		return fmt.Errorf("%w; and unfencing the source failed (resume the cutover to undo it): %v", cause, err)
	}
	if err := j.Record(uctx, StepAbort, cause.Error()); err != nil {
		return fmt.Errorf("%w: %w (journal: %v)", ErrAborted, cause, err)
	}
	return fmt.Errorf("%w: %w", ErrAborted, cause)
}

// Resume settles a cutover after a crash, deterministically, from the journal
// and the topology: published → finish forward (unfence target); fenced but
// not published → undo (unfence source). It returns whether the cutover is
// complete; false means the source owns the ranges and Run may be called again.
func Resume(ctx context.Context, a Actions, j Journal) (done bool, err error) {
	last, err := j.Last(ctx)
	if err != nil {
		return false, fmt.Errorf("read cutover journal: %w", err)
	}
	switch last {
	case "", StepAbort:
		return false, nil
	case StepDone:
		return true, nil
	}
	pub, err := a.Published(ctx)
	if err != nil {
		return false, fmt.Errorf("resume cutover: %w", err)
	}
	if pub {
		if err := a.UnfenceTarget(ctx); err != nil {
			return false, fmt.Errorf("resume cutover after publish: %w", err)
		}
		return true, j.Record(ctx, StepDone, "resumed")
	}
	if err := unfenceSource(ctx, a); err != nil {
		return false, fmt.Errorf("undo cutover before publish: %w", err)
	}
	return false, j.Record(ctx, StepAbort, "resumed after a crash before publish")
}

// How an abort unfences a source it may not reach: the application's writes
// to the moving ranges are refused until it does, so it tries again at once
// and often (UnfenceTry bounds one try: a connection cut off by a network
// partition hangs instead of failing) until it succeeds or UnfenceFor has
// passed. Writes are then refused for the budget plus the time the source is
// unreachable plus one try at most, instead of waiting for the activity's
// retries.
var (
	UnfenceFor = 5 * time.Minute
	UnfenceTry = 2 * time.Second
)

func unfenceSource(ctx context.Context, a Actions) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), UnfenceFor)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		tctx, tcancel := context.WithTimeout(ctx, UnfenceTry)
		err := a.UnfenceSource(tctx)
		tcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("for %s: %w", UnfenceFor, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}
