package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// TestAddRetriesFromTheServer: the retry of a move's activity, as the
// Temporal server reports it, reaches the move's line of reshard status.
func TestAddRetriesFromTheServer(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	const queue = "retrying-test"
	w := worker.New(c.tc, queue, worker.Options{})
	w.RegisterActivityWithOptions(func(context.Context) error {
		return errors.New("dial tcp 127.0.0.1:5433: connect: connection refused")
	}, activity.RegisterOptions{Name: "CopySlice"})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 1, MaximumInterval: 100 * time.Millisecond}})
		return workflow.ExecuteActivity(ctx, "CopySlice").Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "RetryingMove"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx := context.Background()
	parent := workflows.MigrationWorkflowID("retry-test")
	id := workflows.MoveWorkflowID(parent, "shard1-shard3")
	if _, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, "RetryingMove"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.tc.TerminateWorkflow(context.Background(), id, "", "test ends") })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st := workflows.MigrationState{Phase: workflows.PhaseSnapshotCopy, Moves: []workflows.MoveState{
			{Spec: workflows.MoveSpec{ID: "shard1-shard3"}, Phase: workflows.PhaseSnapshotCopy},
			{Spec: workflows.MoveSpec{ID: "shard2-shard3"}, Phase: workflows.PhaseCleanup}, // no such workflow: nothing shown
		}}
		addRetries(ctx, c.tc, parent, &st, time.Now())
		got := st.Moves[0].Retrying
		if strings.HasPrefix(got, "CopySlice attempt ") && strings.HasSuffix(got, ": dial tcp 127.0.0.1:5433: connect: connection refused") &&
			st.Retrying == "" && st.Moves[1].Retrying == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: migration %q, moves %q, %q", st.Retrying, got, st.Moves[1].Retrying)
		}
	}
}
