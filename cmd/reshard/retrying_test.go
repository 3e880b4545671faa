package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reshard/reshard/internal/pgtest"
	"github.com/reshard/reshard/workflows"
)

func TestRetryText(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	pending := []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: "Verify"}, Attempt: 1}, // running, never failed
		{ActivityType: &commonpb.ActivityType{Name: "CopySlice"}, Attempt: 4, NextAttemptScheduleTime: timestamppb.New(now.Add(8 * time.Second)),
			LastFailure: &failurepb.Failure{Message: "copy: failed to connect to `user=postgres database=reshard`:\n\t127.0.0.1:5433: connection refused"}},
		{ActivityType: &commonpb.ActivityType{Name: "Plan"}, Attempt: 2, LastFailure: &failurepb.Failure{Message: strings.Repeat("x", 500)}},
	}
	got := retryText(pending, now)
	want := "CopySlice attempt 4, next in 8s: copy: failed to connect to `user=postgres database=reshard`: 127.0.0.1:5433: connection refused; Plan attempt 2: " +
		strings.Repeat("x", maxFailureText) + "…"
	if got != want {
		t.Errorf("retry text\n got %q\nwant %q", got, want)
	}
	if got := retryText(pending[:1], now); got != "" {
		t.Errorf("an activity that never failed: %q", got)
	}
	st := workflows.MigrationState{Moves: []workflows.MoveState{{Spec: workflows.MoveSpec{Source: "shard1", Target: "shard3"},
		Phase: workflows.PhaseSnapshotCopy, Retrying: "CopySlice attempt 4: connection refused"}}}
	var b strings.Builder
	printMigrationStatus(&b, "x", "", st, now)
	if !strings.Contains(b.String(), "SNAPSHOT_COPY (retrying CopySlice attempt 4: connection refused)") {
		t.Errorf("status does not show the retry:\n%s", b.String())
	}
}

// TestAddRetriesFromTheServer: the retry of a move's activity, as the
// Temporal server reports it, reaches the move's line of reshard status.
func TestAddRetriesFromTheServer(t *testing.T) {
	t.Cleanup(pgtest.Shutdown)
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

// A stream or verify that waits for the shards' schemas says so in its
// heartbeat; status shows it as a wait, not as a failure. Other heartbeats
// (a copy slice's counts) are not taken for one.
func TestSchemaWaitingText(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	hb := func(v ...any) *commonpb.Payloads {
		p, err := dc.ToPayloads(v...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	msg := "the applier waits for target shard5 to get column nickname of public.users, which source shard2 has: run reshard schema apply 'ALTER TABLE public.users ADD COLUMN nickname text'"
	pending := []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityCopySlice}, HeartbeatDetails: hb(map[string]int64{workflows.HeartbeatSliceRows: 5}, nil)},
		{ActivityType: &commonpb.ActivityType{Name: "RunCDC"}, HeartbeatDetails: hb(map[string]string{"applied": "0/1", workflows.HeartbeatWaiting: msg})},
		{ActivityType: &commonpb.ActivityType{Name: "RunCDC"}, HeartbeatDetails: hb(map[string]string{"applied": "0/1"})},
	}
	if got := schemaWaiting(pending); got != msg {
		t.Errorf("schemaWaiting = %q, want %q", got, msg)
	}
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	st := workflows.MigrationState{Moves: []workflows.MoveState{{Spec: workflows.MoveSpec{Source: "shard2", Target: "shard5"},
		Phase: workflows.PhaseCDCCatchUp, Retrying: "waiting: " + msg}}}
	var b strings.Builder
	printMigrationStatus(&b, "x", "", st, now)
	if !strings.Contains(b.String(), "CDC_CATCH_UP (waiting: the applier waits for target shard5") || strings.Contains(b.String(), "retrying") {
		t.Errorf("status:\n%s", b.String())
	}
}
