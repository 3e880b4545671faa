package workflows

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"

	"github.com/reshard/reshard/ring"
)

// carriedBound is the most a migration of 1,000 moves may carry across a
// continue-as-new (TestMigrationCarriedStateAt1000Moves): a quarter of
// Temporal's 2 MB payload limit.
const carriedBound = 512 << 10

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
		var carried []MoveState
		if res != nil {
			var err error
			if carried, err = res.moves(); err != nil {
				t.Fatal(err)
			}
		}
		if res == nil || res.Runs != run+1 || res.Next != done || len(carried) != n || res.FromVersion != 1 || res.Version != 3 || // the newest published: the cutovers' (v3 in the fakes)
			res.MovedFraction != 0.75 || res.Throttle != req.Throttle || res.Paused || len(res.Failed) != 0 {
			if res == nil {
				t.Fatalf("run %d carried nothing", run)
			}
			t.Fatalf("run %d carried runs %d next %d, %d moves, v%d → v%d, moved %v, throttle %+v, paused %v, failed %v", run, res.Runs, res.Next,
				len(carried), res.FromVersion, res.Version, res.MovedFraction, res.Throttle, res.Paused, res.Failed)
		}
		for i, m := range carried {
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
		if res == nil {
			t.Fatal("run 0 carried nothing")
		}
		carried, err := res.moves()
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Failed) != 1 || res.Failed[0] != "t_m5" || !strings.Contains(res.FirstError, "wal_level") || carried[4].Phase != PhaseFailed {
			t.Fatalf("run 0 carried failed %v (%q), move 5 in %s", res.Failed, res.FirstError, carried[4].Phase)
		}
		in = next
	}
}

// TestMigrationCarriedStateAt1000Moves measures what the parent carries
// across its last continue-as-new in a migration of 1,000 moves (each of 4
// ranges): the moves' states as the real Move children report them, 896 of
// them finished. Temporal refuses a payload over 2 MB; the bound keeps a
// margin. The states of the runs before are those of the first run's
// finished moves (each with its own spec), so only two runs execute.
func TestMigrationCarriedStateAt1000Moves(t *testing.T) {
	const n = 1000
	plan := bigPlan(n)
	for i := range plan.Moves { // tokens of a real ring: 19 digits
		lo := ring.MinToken + int64(i)*(1<<53) + 7_777_777_777
		plan.Moves[i].Ranges = nil
		for k := int64(0); k < 4; k++ {
			plan.Moves[i].Ranges = append(plan.Moves[i].Ranges, ring.Range{Lo: lo + k<<50, Hi: lo + k<<50 + 1<<49 - 12_345})
		}
	}
	carried := func(in MigrationRequest) (MigrationRequest, int) {
		t.Helper()
		env, _ := newEnv(t)
		env.SetTestTimeout(5 * time.Minute)
		env.OnActivity(ActivityPlan, mock.Anything, mock.Anything).Return(plan, nil)
		env.ExecuteWorkflow(MigrationWorkflow, in)
		var can *workflow.ContinueAsNewError
		if err := env.GetWorkflowError(); !errors.As(err, &can) {
			t.Fatalf("want continue-as-new, got %v", err)
		}
		var next MigrationRequest
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			t.Fatal(err)
		}
		size := 0
		for _, p := range can.Input.GetPayloads() {
			size += proto.Size(p)
		}
		return next, size
	}
	next, first := carried(testRequest())
	res := *next.Resume
	moves, err := res.moves()
	if err != nil || len(moves) != n || moves[0].Phase != PhaseDone || len(moves[0].Timings) == 0 {
		t.Fatalf("the first run carried %d moves (%v)", len(moves), err)
	}
	last := (n - 1) / movesPerRun * movesPerRun // the last run starts here; the one before carries the most
	// The test server's clock makes every move's timings alike, which
	// would compress unlike real ones: each move gets its own instants and
	// counts, as moves of a real migration have.
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range last - movesPerRun {
		ms := moves[i%movesPerRun]
		ms.Spec = plan.Moves[i]
		ms.Timings = slices.Clone(ms.Timings)
		at := time.Duration(rnd.Int64N(int64(48 * time.Hour)))
		for k := range ms.Timings {
			ms.Timings[k].Start = ms.Timings[k].Start.Add(at)
			at += time.Duration(rnd.Int64N(int64(20 * time.Minute)))
			ms.Timings[k].End = ms.Timings[k].Start.Add(at)
		}
		ms.UpdatedAt = ms.UpdatedAt.Add(at)
		ms.RowsCopied, ms.BytesCopied = rnd.Int64N(1e9), rnd.Int64N(1e12)
		ms.WritePause = time.Duration(rnd.Int64N(int64(time.Second)))
		moves[i] = ms
	}
	// Handed over in the form runs carried before carry-compact-moves,
	// which a run must still read.
	res.Moves, res.MovesGz = moves, nil
	res.Next, res.Runs = last-movesPerRun, last/movesPerRun-1
	next.Resume = &res
	final, size := carried(next)
	got, err := final.Resume.moves()
	if err != nil || final.Resume.Next != last || len(got) != n || got[last-1].Phase != PhaseDone || got[last].Phase != PhasePlan {
		t.Fatalf("the run before the last carried next %d, %d moves (%v)", final.Resume.Next, len(got), err)
	}
	for i := range last - movesPerRun { // the moves of the runs before, as they came
		if !reflect.DeepEqual(got[i], moves[i]) {
			t.Fatalf("carried move %d changed:\n%+v\n%+v", i, got[i], moves[i])
		}
	}
	plain, err := converter.GetDefaultDataConverter().ToPayloads(MigrationRequest{Resume: &MigrationResume{Moves: got}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("carried across continue-as-new, %d moves: %d bytes after the first run (%d done), %d bytes before the last (%d done); the same moves uncompressed (as carried before carry-compact-moves): %d bytes",
		n, first, movesPerRun, size, last, proto.Size(plain))
	if size > carriedBound {
		t.Fatalf("the carried state at %d moves is %d bytes, over the bound %d (Temporal refuses 2 MB)", n, size, carriedBound)
	}
}
