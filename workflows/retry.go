package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// How long a transient error of a move's step may persist, retried, before
// the move stops for the operator with the error and how long it lasted
// (ErrTypePersisted): an operator reasons in minutes, not in retry counts.
// A step that succeeds starts its count again. Errors that no retry fixes
// (non-retryable application errors) stop or fail the move at once, as
// before.
const (
	// RetryChecks: PLAN's checks of a move (PreflightMove).
	RetryChecks = 10 * time.Minute
	// RetrySetup: the steps that make or remake a move's objects: JOINING,
	// the reverse slot, the forward slot's drop, a slot made again after a
	// failover.
	RetrySetup = 30 * time.Minute
	// RetryCopy: a copy slice, and the repair after a failover.
	RetryCopy = 30 * time.Minute
	// RetryPhase: the activities next to the stream: the lag poll of
	// CDC_CATCH_UP, verify, a cutover attempt.
	RetryPhase = 10 * time.Minute
	// RetryEnd: CLEANUP and a rollback, which nothing else can finish.
	RetryEnd = time.Hour
)

// ErrTypePersisted: a step's transient error persisted for its Retry*
// duration; the move stopped for the operator (resume runs the step again).
const ErrTypePersisted = "ErrorPersisted"

// versionRetryByTime marks the runs whose steps are retried until their
// error has persisted for a Retry* duration; before it Temporal retried
// them by attempt counts (5, or without end), and a step that used up its
// attempts failed the move.
const versionRetryByTime = "retry-by-time"

// retryRound is the retry policy of one execution of a step in runs that
// retry by time: Temporal retries its attempts (1 s doubled up to 30 s,
// about 2.5 minutes for the ten), so that reshard status still shows the
// attempt, the next try and the last failure from the pending activity;
// the workflow runs the step again after each failed round until the error
// has persisted for the step's Retry* duration, a round costing its history
// a few events where an attempt of its own would cost as many.
var retryRound = temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 10}

// transient reports whether err is worth another attempt: not a
// non-retryable application error, not a cancellation.
func transient(err error) bool {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.NonRetryable() {
		return false
	}
	var canceled *temporal.CanceledError
	return !errors.As(err, &canceled)
}

// persistence follows one step's failures: when the first failed round of
// the current run of failures ended, and how many rounds failed.
type persistence struct {
	first  time.Time
	rounds int
}

// failed records a failed round of the step at now and says whether its
// error has persisted for limit; if so, err is the error to stop with.
// The count starts at the end of the first failed round, so a step stops
// after at least limit of failures (the first round's retries, about 2.5
// minutes, are not counted).
func (p *persistence) failed(now time.Time, limit time.Duration, step string, cause error) (stop bool, err error) {
	if p.rounds == 0 {
		p.first = now
	}
	p.rounds++
	lasted := now.Sub(p.first)
	if lasted < limit {
		return false, nil
	}
	return true, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s has failed for %s (since %s UTC, %d rounds of %d attempts; the limit is %s): %s",
			step, lasted.Round(time.Second), p.first.UTC().Format("15:04:05"), p.rounds, retryRound.MaximumAttempts, limit, rootMessage(cause)),
		ErrTypePersisted, cause)
}

// retriedByTime reports whether this run retries its steps by time
// (versionRetryByTime).
func retriedByTime(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionRetryByTime, workflow.DefaultVersion, 1) >= 1
}

// execute runs the activity name of a step with actx's options. In runs
// that retry by time, each execution retries its attempts by retryRound,
// and the step runs again after a failed round until its error has
// persisted for limit (then an ErrTypePersisted error); older runs keep
// the activity's own retry policy.
func (m *moveRun) execute(ctx, actx workflow.Context, limit time.Duration, step, name string, in, out any) error {
	if !retriedByTime(ctx) {
		return workflow.ExecuteActivity(actx, name, in).Get(ctx, out)
	}
	actx = workflow.WithRetryPolicy(actx, retryRound)
	var p persistence
	for {
		err := workflow.ExecuteActivity(actx, name, in).Get(ctx, out)
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		if err := m.retryAfter(ctx, &p, limit, step, err); err != nil {
			return err
		}
	}
}

// retryAfter records a failed round of step; once its error has lasted
// limit, it returns the ErrTypePersisted error to stop with instead.
func (m *moveRun) retryAfter(ctx workflow.Context, p *persistence, limit time.Duration, step string, err error) error {
	if stop, perr := p.failed(workflow.Now(ctx), limit, step, err); stop {
		return perr
	}
	workflow.GetLogger(ctx).Warn("step failed; retrying", "move", m.in.Spec.ID, "step", step, "rounds", p.rounds,
		"failing_for", workflow.Now(ctx).Sub(p.first), "limit", limit, "error", err)
	return nil
}

// persisted reports a step whose error persisted for its limit.
func persisted(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTypePersisted
}
