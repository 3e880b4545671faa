package workflows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/reshard/reshard/ring"
)

// bigPlan is a plan of n moves, each a small range from one of 16 sources
// to its own target.
func bigPlan(n int) PlanResult {
	p := PlanResult{FromVersion: 1, MovedFraction: 0.75}
	for i := 0; i < n; i++ {
		p.Moves = append(p.Moves, MoveSpec{ID: fmt.Sprintf("t_m%d", i+1), Source: fmt.Sprintf("shard%d", i%16), Target: fmt.Sprintf("new%d", i),
			Ranges: []ring.Range{{Lo: int64(i) * 1000, Hi: int64(i)*1000 + 500}}, EstRows: 10})
	}
	return p
}

// TestMigrationContinuesAsNew: a migration of more than movesPerRun moves
// starts them movesPerRun at a time, one batch per run, and carries the
// moves' states and the operators' settings from run to run; the plan and
// the migrating topology come once, the stable topology once, at the end.
func TestMigrationContinuesAsNew(t *testing.T) {
	const n = 2*movesPerRun + 44
	plan := bigPlan(n)
	req := testRequest()
	req.Throttle = Throttle{RowsPerSec: 500}
	batches := []int{movesPerRun, movesPerRun, 44}
	in := req
	for run, batch := range batches {
		env, f := newEnv(t)
		env.SetTestTimeout(5 * time.Minute)
		env.OnActivity(ActivityPlan, mock.Anything, mock.Anything).Return(func(ctx context.Context, r MigrationRequest) (PlanResult, error) {
			f.record(ActivityPlan, r)
			return plan, nil
		})
		env.ExecuteWorkflow(MigrationWorkflow, in)
		if n := f.count(ActivityJoin); n != batch {
			t.Fatalf("run %d joined %d moves, want %d", run, n, batch)
		}
		first := 0
		if run == 0 {
			first = 1
		}
		if f.count(ActivityPlan) != first || f.count(ActivityPublishMigrating) != first {
			t.Fatalf("run %d: plan %d times, migrating topology %d times; want %d", run, f.count(ActivityPlan), f.count(ActivityPublishMigrating), first)
		}
		if run == len(batches)-1 {
			st := result[MigrationState](t, env)
			if st.Phase != PhaseDone || st.Version != 9 || st.FromVersion != 1 || st.MovedFraction != 0.75 || len(st.Moves) != n || st.Request.Resume != nil {
				t.Fatalf("last run ended %s v%d from v%d, %d moves (resume %v)", st.Phase, st.Version, st.FromVersion, len(st.Moves), st.Request.Resume)
			}
			for i, m := range st.Moves {
				if m.Phase != PhaseDone || m.Spec.ID != plan.Moves[i].ID || !m.CopyDone || m.Verify == nil {
					t.Fatalf("move %d (%s) ended %s", i, m.Spec.ID, m.Phase)
				}
			}
			pub := f.last[ActivityPublishStable].(PublishInput)
			if f.count(ActivityPublishStable) != 1 || len(pub.Moves) != n || pub.Request.Resume != nil {
				t.Fatalf("stable topology published %d times for %d moves", f.count(ActivityPublishStable), len(pub.Moves))
			}
			break
		}
		if f.count(ActivityPublishStable) != 0 {
			t.Fatalf("run %d published the stable topology with moves left", run)
		}
		var can *workflow.ContinueAsNewError
		if err := env.GetWorkflowError(); !errors.As(err, &can) {
			t.Fatalf("run %d: want continue-as-new, got %v", run, err)
		}
		var next MigrationRequest
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			t.Fatal(err)
		}
		res := next.Resume
		done := (run + 1) * movesPerRun
		if res == nil || res.Runs != run+1 || res.Next != done || len(res.Moves) != n || res.FromVersion != 1 || res.Version != 2 ||
			res.MovedFraction != 0.75 || res.Throttle != req.Throttle || res.Paused || len(res.Failed) != 0 {
			if res == nil {
				t.Fatalf("run %d carried nothing", run)
			}
			t.Fatalf("run %d carried runs %d next %d, %d moves, v%d → v%d, moved %v, throttle %+v, paused %v, failed %v", run, res.Runs, res.Next,
				len(res.Moves), res.FromVersion, res.Version, res.MovedFraction, res.Throttle, res.Paused, res.Failed)
		}
		for i, m := range res.Moves {
			if want := map[bool]Phase{true: PhaseDone, false: PhasePlan}[i < done]; m.Phase != want || m.Spec.ID != plan.Moves[i].ID {
				t.Fatalf("run %d carried move %d (%s) in %s, want %s", run, i, m.Spec.ID, m.Phase, want)
			}
		}
		next.Resume = nil
		if fmt.Sprintf("%+v", next) != fmt.Sprintf("%+v", req) {
			t.Fatalf("run %d changed the request:\n%+v\n%+v", run, next, req)
		}
		next.Resume = res
		in = next
	}
}

// TestMigrationContinuesAsNewCarriesFailures: a move that fails in one run
// fails the migration at the end of the last, with the stable topology left
// unpublished, as when every move ran in one run.
func TestMigrationContinuesAsNewCarriesFailures(t *testing.T) {
	plan := bigPlan(movesPerRun + 4)
	in := testRequest()
	for run := 0; run < 2; run++ {
		env, f := newEnv(t)
		env.SetTestTimeout(5 * time.Minute)
		env.OnActivity(ActivityPlan, mock.Anything, mock.Anything).Return(plan, nil)
		env.OnActivity(ActivityPreflightMove, mock.Anything, mock.Anything).Return(func(ctx context.Context, ref MoveRef) error {
			if ref.Spec.ID == "t_m5" {
				return temporal.NewNonRetryableApplicationError("shard4: wal_level is replica: set wal_level = logical", ErrTypePreflight, nil)
			}
			return nil
		})
		env.ExecuteWorkflow(MigrationWorkflow, in)
		err := env.GetWorkflowError()
		if run == 1 {
			if err == nil || !strings.Contains(err.Error(), "moves t_m5 failed") || !strings.Contains(err.Error(), "wal_level") {
				t.Fatalf("last run: %v, want the failure of t_m5", err)
			}
			if f.count(ActivityPublishStable) != 0 {
				t.Fatal("the stable topology was published with a move failed")
			}
			if f.count(ActivityJoin) != 4 {
				t.Fatalf("last run joined %d moves, want 4", f.count(ActivityJoin))
			}
			return
		}
		var can *workflow.ContinueAsNewError
		if !errors.As(err, &can) {
			t.Fatalf("run 0: want continue-as-new, got %v", err)
		}
		var next MigrationRequest
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			t.Fatal(err)
		}
		res := next.Resume
		if res == nil || len(res.Failed) != 1 || res.Failed[0] != "t_m5" || !strings.Contains(res.FirstError, "wal_level") || res.Moves[4].Phase != PhaseFailed {
			if res == nil {
				t.Fatal("run 0 carried nothing")
			}
			t.Fatalf("run 0 carried failed %v (%q), move 5 in %s", res.Failed, res.FirstError, res.Moves[4].Phase)
		}
		in = next
	}
}
