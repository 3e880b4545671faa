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
// error has persisted for a Retry* duration, each attempt an activity of
// one attempt; before it Temporal retried them by attempt counts (5, or
// without end), and a step that used up its attempts failed the move.
const versionRetryByTime = "retry-by-time"

// retryBackoff is the wait before a step's next attempt: 1 s, doubled up
// to 30 s, as the activities' retry policies did.
func retryBackoff(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

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

// persistence follows one step's failures: when the first of the current
// run of failures was seen, and how many there were.
type persistence struct {
	first    time.Time
	failures int
}

// failed records a transient failure of the step at now and says whether
// it has persisted for limit; if so, err is the error to stop with.
func (p *persistence) failed(now time.Time, limit time.Duration, step string, cause error) (stop bool, err error) {
	if p.failures == 0 {
		p.first = now
	}
	p.failures++
	lasted := now.Sub(p.first)
	if lasted < limit {
		return false, nil
	}
	return true, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s has failed for %s (since %s UTC, %d attempts; the limit is %s): %s",
			step, lasted.Round(time.Second), p.first.UTC().Format("15:04:05"), p.failures, limit, rootMessage(cause)),
		ErrTypePersisted, cause)
}

// retriedByTime reports whether this run retries its steps by time
// (versionRetryByTime).
func retriedByTime(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionRetryByTime, workflow.DefaultVersion, 1) >= 1
}

// execute runs the activity name of a step with actx's options. In runs
// that retry by time, each attempt is one activity execution, and a
// transient failure is tried again after retryBackoff until it has
// persisted for limit (then an ErrTypePersisted error); older runs keep
// the activity's own retry policy.
func (m *moveRun) execute(ctx, actx workflow.Context, limit time.Duration, step, name string, in, out any) error {
	if !retriedByTime(ctx) {
		return workflow.ExecuteActivity(actx, name, in).Get(ctx, out)
	}
	actx = workflow.WithRetryPolicy(actx, temporal.RetryPolicy{MaximumAttempts: 1})
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

// retryAfter records a transient failure of step and waits retryBackoff
// before its next attempt; once the failures have lasted limit, it returns
// the ErrTypePersisted error to stop with instead.
func (m *moveRun) retryAfter(ctx workflow.Context, p *persistence, limit time.Duration, step string, err error) error {
	if stop, perr := p.failed(workflow.Now(ctx), limit, step, err); stop {
		return perr
	}
	workflow.GetLogger(ctx).Warn("step failed; retrying", "move", m.in.Spec.ID, "step", step, "attempt", p.failures,
		"failing_for", workflow.Now(ctx).Sub(p.first), "limit", limit, "error", err)
	return workflow.Sleep(ctx, retryBackoff(p.failures))
}

// persisted reports a step whose error persisted for its limit.
func persisted(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTypePersisted
}
