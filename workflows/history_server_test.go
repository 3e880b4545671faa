package workflows

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// historyBound is the most events any one history of a migration may hold:
// under the server's warning at 10,240 events.
const historyBound = 10_000

// checkManyMoves runs a migration of n moves against a dev server with every
// activity stubbed, then checks every history it wrote: the bound, and a
// replay.
func checkManyMoves(t *testing.T, n int) {
	t.Cleanup(pgtest.StopTemporal) // its workers and workflows end with it; the package starts no PostgreSQL server
	tt := pgtest.Temporal(t)
	c, err := client.Dial(client.Options{HostPort: tt.Address(), Namespace: devenv.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := worker.New(c, TaskQueue, worker.Options{EnableSessionWorker: true, MaxConcurrentSessionExecutionSize: 2 * movesPerRun})
	Register(w)
	stubActivities(w, bigPlan(n))
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	req := testRequest()
	req.ID = "big"
	req.GracePeriod = new(time.Duration) // no GRACE wait: cleanup right after cutover
	req.PollInterval = 200 * time.Millisecond
	req.HeartbeatTimeout = 3 * time.Second
	req.CutoverBackoff = time.Second
	start := time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: MigrationWorkflowID(req.ID), TaskQueue: TaskQueue}, MigrationWorkflow, req)
	if err != nil {
		t.Fatal(err)
	}
	firstRun := run.GetRunID() // Get follows the continuations and moves on to the last
	var st MigrationState
	if err := Outcome(run.Get(ctx, &st), &st); err != nil {
		t.Fatalf("migration of %d moves: %v", n, err)
	}
	t.Logf("%d moves done in %s", n, time.Since(start).Round(time.Second))
	if st.Phase != PhaseDone || len(st.Moves) != n {
		t.Fatalf("migration ended %s with %d moves", st.Phase, len(st.Moves))
	}
	for _, m := range st.Moves {
		if m.Phase != PhaseDone {
			t.Fatalf("move %s ended %s", m.Spec.ID, m.Phase)
		}
	}

	replayer := worker.NewWorkflowReplayer()
	Register(replayer)
	// check reads every run of workflow id from runID on, following its
	// continuations, holds each history to the bound and replays it; it
	// returns the runs' sizes.
	check := func(id, runID string) []int {
		var sizes []int
		for {
			h, next := history(ctx, t, c, id, runID)
			sizes = append(sizes, len(h.Events))
			if len(h.Events) >= historyBound {
				t.Errorf("%s run %s: %d events, bound %d", id, runID, len(h.Events), historyBound)
			}
			if err := replayer.ReplayWorkflowHistory(nil, h); err != nil {
				t.Errorf("replay %s run %s: %v", id, runID, err)
			}
			if next == "" {
				return sizes
			}
			runID = next
		}
	}
	parent := check(MigrationWorkflowID(req.ID), firstRun)
	if want := (n + movesPerRun - 1) / movesPerRun; len(parent) != want {
		t.Errorf("the parent ran %d times, want %d (%d moves, %d per run)", len(parent), want, n, movesPerRun)
	}
	t.Logf("the parent's runs: %v events", parent)
	largest := 0
	for _, m := range st.Moves {
		for _, k := range check(MoveWorkflowID(MigrationWorkflowID(req.ID), m.Spec.ID), "") {
			largest = max(largest, k)
		}
	}
	t.Logf("largest Move history: %d events", largest)
}

// history reads the whole history of run runID of workflow id ("" the
// latest) and the run it continued as, if any.
func history(ctx context.Context, t *testing.T, c client.Client, id, runID string) (*historypb.History, string) {
	t.Helper()
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		h.Events = append(h.Events, ev)
	}

	if n := len(h.Events); n > 0 {
		if a := h.Events[n-1].GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
			return h, a.GetNewExecutionRunId()
		}
	}
	return h, ""
}

// stubActivities registers every activity as a stub: the plan is plan, every
// step succeeds at once, and the streams run until cancelled.
func stubActivities(w worker.Worker, plan PlanResult) {
	reg := func(name string, fn any) { w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	stream := func(ctx context.Context, in CDCInput) error {
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
				activity.RecordHeartbeat(ctx, "streaming")
			}
		}
	}
	reg(ActivityPlan, func(ctx context.Context, req MigrationRequest) (PlanResult, error) { return plan, nil })
	reg(ActivityPublishMigrating, func(ctx context.Context, in PublishInput) (int64, error) { return 2, nil })
	reg(ActivityPublishStable, func(ctx context.Context, in PublishInput) (int64, error) { return 3, nil })
	reg(ActivityPreflightMove, func(ctx context.Context, in MoveRef) error { return nil })
	reg(ActivityJoin, func(ctx context.Context, in MoveRef) (JoinResult, error) { return JoinResult{L0: "0/16B3748"}, nil })
	reg(ActivityCopySlice, func(ctx context.Context, in CopySliceInput) (CopyProgress, error) {
		return CopyProgress{Rows: 100, Bytes: 1000, Done: true}, nil
	})
	reg(ActivityRunCDC, stream)
	reg(ActivityRunReverse, stream)
	reg(ActivityCDCStatus, func(ctx context.Context, in MoveRef) (CDCStatus, error) { return CDCStatus{LagBytes: 0}, nil })
	reg(ActivityVerify, func(ctx context.Context, in VerifyInput) (VerifySummary, error) {
		return VerifySummary{Passed: true, Rows: 100}, nil
	})
	reg(ActivityPrepareReverse, func(ctx context.Context, in MoveRef) (JoinResult, error) { return JoinResult{L0: "0/2000000"}, nil })
	reg(ActivityCutover, func(ctx context.Context, in CutoverInput) (CutoverResult, error) {
		return CutoverResult{WritePause: 40 * time.Millisecond, Version: 3}, nil
	})
	reg(ActivityStopForward, func(ctx context.Context, in MoveRef) error { return nil })
	reg(ActivityCleanup, func(ctx context.Context, in EndInput) (CleanupResult, error) {
		return CleanupResult{RowsDeleted: 100}, nil
	})
	reg(ActivityRollback, func(ctx context.Context, in EndInput) (CleanupResult, error) { return CleanupResult{}, nil })
}
