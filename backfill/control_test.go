package backfill

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A throttled wait that cannot end before the context's deadline waits for
// the deadline and returns the context's error: a copy slice ending is not
// a failed copy (rate.Limiter.WaitN would fail at once with an error of its
// own, and every throttled slice would end as a failure).
func TestThrottleWaitEndsWithItsContext(t *testing.T) {
	th := NewThrottle(10, 0) // burst 1: 100 rows take ~10 s
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := th.Wait(ctx, 100, 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait past the deadline: %v, want the context's deadline error", err)
	}
	if el := time.Since(start); el < 250*time.Millisecond || el > 2*time.Second {
		t.Fatalf("wait returned after %s, want at the deadline (300ms)", el)
	}
	// Within the deadline it passes, at the rate.
	th = NewThrottle(100, 0)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	start = time.Now()
	if _, err := th.Wait(ctx2, 50, 0); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 350*time.Millisecond || el > 3*time.Second {
		t.Fatalf("50 rows at 100 rows/s (burst 10) took %s, want about 400ms", el)
	}
}
