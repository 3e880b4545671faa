package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/workflows"
)

// NoMigration: Temporal knows no workflow of the migration (bad input: the
// operator named one that does not exist). Hint, when set, follows the
// message.
type NoMigration struct {
	ID, WorkflowID string
	Hint           string
}

func (e *NoMigration) Error() string {
	return fmt.Sprintf("no migration %s (workflow %s not found); reshard list shows them", e.ID, e.WorkflowID) + e.Hint
}

// NewestRunning is the id of the most recently started running migration.
func NewestRunning(ctx context.Context, tc client.Client) (string, error) {
	ms, err := List(ctx, tc, RunningMigrations, 0)
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return "", errors.New("no migration is running; give an id (reshard list shows recent ones)")
	}
	return ms[0].ID, nil
}

// State asks migration workflow wfID for its MigrationState, waiting at
// most timeout for a worker to answer. A workflow that does not exist is a
// *NoMigration; one nobody answers for is explained.
func State(ctx context.Context, tc client.Client, wfID string, timeout time.Duration) (workflows.MigrationState, error) {
	var st workflows.MigrationState
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := tc.QueryWorkflow(qctx, wfID, "", workflows.QueryState)
	if err == nil {
		if err := v.Get(&st); err != nil {
			return st, fmt.Errorf("decode the state of %s: %w", wfID, err)
		}
		return st, nil
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return st, &NoMigration{ID: IDOf(wfID), WorkflowID: wfID}
	}
	// The query's own deadline, or the frontend giving up on it first (a
	// stream reset: codes.Canceled or DeadlineExceeded), with the caller's
	// context alive: no worker answered.
	if ctx.Err() == nil && (qctx.Err() != nil || Abandoned(err)) {
		return st, fmt.Errorf("no worker answered the state query of %s within %s (workflow status: %s): is reshard worker running on task queue %q?",
			wfID, timeout, statusOf(ctx, tc, wfID), workflows.TaskQueue)
	}
	return st, fmt.Errorf("query the state of %s: %w", wfID, err)
}

// NoWorkerToAsk is status's answer when no worker runs: the migration does
// not exist (*NoMigration), or no one can answer its state query now
// (fix: how to start a worker).
func NoWorkerToAsk(ctx context.Context, tc client.Client, wfID, fix string) error {
	d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &NoMigration{ID: IDOf(wfID), WorkflowID: wfID}
	}
	status := "unknown"
	if err == nil {
		status = StatusText(d.GetWorkflowExecutionInfo().GetStatus())
	}
	return fmt.Errorf("no worker can answer the state query of %s (workflow status: %s): %s", wfID, status, fix)
}

// statusOf is workflow wfID's status in lower case, "unknown" when
// Temporal does not say.
func statusOf(ctx context.Context, tc client.Client, wfID string) string {
	d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		return "unknown"
	}
	return StatusText(d.GetWorkflowExecutionInfo().GetStatus())
}

// PendingActivities are the running activities of workflow wfID (nil when
// Temporal does not say): their last heartbeats and retries.
func PendingActivities(ctx context.Context, tc client.Client, wfID string) []*workflowpb.PendingActivityInfo {
	d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		return nil
	}
	return d.GetPendingActivities()
}

// MoveState is the state move workflow wfID answers itself (false when it
// does not).
func MoveState(ctx context.Context, tc client.Client, wfID string) (workflows.MoveState, bool) {
	var own workflows.MoveState
	v, err := tc.QueryWorkflow(ctx, wfID, "", workflows.QueryState)
	return own, err == nil && v.Get(&own) == nil
}
