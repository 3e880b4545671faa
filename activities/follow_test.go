package activities

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/workflows"
)

type calmSignals struct{}

func (calmSignals) Read(context.Context) (backfill.Signals, error) {
	return backfill.Signals{ActiveBackends: 20, SlotWAL: -1}, nil
}

// A running verify follows the throttle its move has in force: a rows/s
// change and new adaptive limits reach it while it runs, asked of the
// move's workflow by its id. Without LiveThrottle nothing is asked.
func TestFollowTakesThrottleChanges(t *testing.T) {
	old := ThrottleFollowInterval
	ThrottleFollowInterval = 20 * time.Millisecond
	defer func() { ThrottleFollowInterval = old }()

	var mu sync.Mutex
	var asked []string
	inForce := workflows.Throttle{RowsPerSec: 1000, Adaptive: &workflows.AdaptiveThrottle{MaxActiveBackends: 10}}
	a := New(&Resolver{}, nil, nil)
	a.LiveThrottle = func(_ context.Context, id string) (workflows.Throttle, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, id)
		return inForce, nil
	}
	var th *backfill.Throttle
	var ad *backfill.Adaptive
	work := func(ctx context.Context) error {
		started := inForce
		th = backfill.NewThrottle(started.RowsPerSec, 0)
		ad = &backfill.Adaptive{Throttle: th, Reader: calmSignals{}, Interval: 10 * time.Millisecond,
			Controller: backfill.Controller{Max: 1000, Limits: adaptiveLimits(started.Adaptive)}}
		return ad.With(ctx, func(ctx context.Context) error {
			defer a.follow(ctx, started, th, true, ad)()
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			inForce = workflows.Throttle{RowsPerSec: 2000, Adaptive: &workflows.AdaptiveThrottle{MaxActiveBackends: 50}}
			mu.Unlock()
			time.Sleep(200 * time.Millisecond)
			return nil
		})
	}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(work, activity.RegisterOptions{Name: "Work"})
	if _, err := env.ExecuteActivity("Work"); err != nil {
		t.Fatal(err)
	}
	if rows, _ := th.Limits(); rows != 2000 {
		t.Errorf("rows/s in force %g after the change to 2000", rows)
	}
	if l := ad.Controller.Limits; l.MaxActiveBackends != 50 || ad.Controller.Max != 2000 {
		t.Errorf("adaptive limits %+v, ceiling %g after the change to 50 backends, 2000 rows/s", l, ad.Controller.Max)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < 2 || asked[0] != "default-test-workflow-id" {
		t.Errorf("asked %v; want the activity's workflow, more than once", asked)
	}

	// No LiveThrottle: follow does nothing.
	a.LiveThrottle = nil
	th2 := backfill.NewThrottle(1000, 0)
	a.follow(context.Background(), workflows.Throttle{RowsPerSec: 1000}, th2, true, nil)()
	if rows, _ := th2.Limits(); rows != 1000 {
		t.Errorf("rows/s %g without LiveThrottle", rows)
	}
}
