package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// PollerFresh is how recently a poller must have polled to count as a
// running worker: a worker's long poll lasts about a minute, and Temporal
// lists a poller for minutes after it stopped.
const PollerFresh = 2 * time.Minute

// WorkerPolls says whether a worker polled the workflow task queue within
// PollerFresh (Temporal's DescribeTaskQueue). Workflow tasks are what apply
// an Update, so that is the queue asked.
func WorkerPolls(ctx context.Context, tc client.Client) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := tc.DescribeTaskQueue(ctx, workflows.TaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return false, fmt.Errorf("ask Temporal which workers poll task queue %q: %w", workflows.TaskQueue, err)
	}
	for _, p := range resp.GetPollers() {
		if t := p.GetLastAccessTime(); t != nil && time.Since(t.AsTime()) < PollerFresh {
			return true, nil
		}
	}
	return false, nil
}

// Workers reads the workers' own reports (topology.Store.Workers of the
// task queue); nil when there is no control database to ask.
type Workers func(ctx context.Context) ([]topology.Worker, error)

// WorkerRuns says whether a worker runs now. Temporal lists a worker's
// poller for PollerFresh after it died, so its answer alone leaves a
// two-minute blind spot in which an action is sent, a migration starts and
// status waits its whole timeout, all for nobody. Workers also report
// themselves in the control database every topology.WorkerReportEvery and
// remove their row when they stop: when reports answers, a worker counts
// only if it also reported within topology.WorkerFresh. Without an answer
// (no control database, an older one, none within the caller's deadline),
// Temporal's answer stands.
func WorkerRuns(ctx context.Context, tc client.Client, reports Workers) (bool, error) {
	polls, err := WorkerPolls(ctx, tc)
	if err != nil || !polls || reports == nil {
		return polls, err
	}
	ws, err := reports(ctx)
	if err != nil {
		return polls, nil
	}
	return len(ws) > 0, nil
}

// Run is what Temporal says of one workflow's latest run.
type Run struct {
	Found   bool
	Running bool
	// Status is how it stands (running, completed, failed, terminated ...)
	// and Phase its ReshardPhase search attribute ("" for none).
	Status, Phase string
}

// Describe asks Temporal about workflow wfID's latest run, within timeout.
// A workflow Temporal does not know is Run{Found: false}, not an error.
func Describe(ctx context.Context, tc client.Client, wfID string, timeout time.Duration) (Run, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return Run{}, nil
	}
	if err != nil {
		return Run{}, err
	}
	info := d.GetWorkflowExecutionInfo()
	st := info.GetStatus()
	return Run{Found: true, Running: st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, Status: StatusText(st),
		Phase: PayloadString(info.GetSearchAttributes().GetIndexedFields()[workflows.SAPhase.GetName()])}, nil
}

// Liveness is what Temporal says of a migration's workflows: its Migration
// workflow and its moves'.
type Liveness struct {
	// Running is the workflow id of one that runs ("" when none does).
	Running string
	// Migration is the Migration workflow's latest run (Found false: its
	// history is lost).
	Migration Run
}

// DescribeError is Temporal not answering about one workflow.
type DescribeError struct {
	Workflow string
	Err      error
}

func (e *DescribeError) Error() string {
	return fmt.Sprintf("ask Temporal about workflow %s: %v", e.Workflow, e.Err)
}

func (e *DescribeError) Unwrap() error { return e.Err }

// MigrationRuns asks Temporal whether a workflow of migration id runs: its
// Migration workflow or the Move workflow of one of moves (the stored
// plan's move ids), each asked within timeout. The error is Temporal not
// answering (*DescribeError).
func MigrationRuns(ctx context.Context, tc client.Client, id string, moves []string, timeout time.Duration) (Liveness, error) {
	parent := workflows.MigrationWorkflowID(id)
	ids := []string{parent}
	for _, m := range moves {
		ids = append(ids, workflows.MoveWorkflowID(parent, m))
	}
	var l Liveness
	for i, wf := range ids {
		r, err := Describe(ctx, tc, wf, timeout)
		if err != nil {
			return Liveness{}, &DescribeError{Workflow: wf, Err: err}
		}
		if i == 0 {
			l.Migration = r
		}
		if r.Running {
			l.Running = wf
			return l, nil
		}
	}
	return l, nil
}

// WorkersKnow refuses shards no running worker's configuration names: a
// migration's workflow would start and fail at once, telling the operator
// to add the shard to a file that may already have it (the worker had not
// reloaded it). Workers report the shards they know in store's
// reshard.workers and reload their file every poll. With no worker
// reporting (none runs, or the reports cannot be read), it passes.
func WorkersKnow(ctx context.Context, store *topology.Store, shards []string, poll time.Duration) error {
	ws, err := store.Workers(ctx, workflows.TaskQueue)
	if err != nil || len(ws) == 0 {
		return nil
	}
	missing := topology.UnknownToWorkers(ws, shards)
	if len(missing) == 0 {
		return nil
	}
	var known []string
	for _, w := range ws {
		known = append(known, fmt.Sprintf("%s knows %s", w.Identity, strings.Join(w.Shards, ",")))
	}
	return fmt.Errorf("no running worker knows shard(s) %s (%s): add them to the configuration file the workers read; a worker reloads it within %s of a change (or on SIGHUP): retry in a few seconds; nothing was started",
		strings.Join(missing, ", "), strings.Join(known, "; "), poll)
}

// Reports reads the workers' reports of the task queue from a store open
// opens (and closes after), within 2s: a later answer counts as none.
func Reports(open func(context.Context) (*topology.Store, func(), error)) Workers {
	return func(ctx context.Context) ([]topology.Worker, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		store, closeStore, err := open(ctx)
		if err != nil {
			return nil, err
		}
		defer closeStore()
		return store.Workers(ctx, workflows.TaskQueue)
	}
}
