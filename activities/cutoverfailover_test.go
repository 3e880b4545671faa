package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/workflows"
)

// drainFailsOver are the actions of a cutover attempt whose drain finds
// the stream ended on the source's failover; unfence fails while
// sourceDown.
type drainFailsOver struct{ sourceDown bool }

func (drainFailsOver) Gates(context.Context) error                       { return nil }
func (drainFailsOver) FenceSource(context.Context) error                 { return nil }
func (drainFailsOver) WaitInFlight(context.Context, time.Duration) error { return nil }
func (drainFailsOver) EmitMarker(context.Context) (string, error)        { return "m", nil }
func (drainFailsOver) Drain(context.Context, string, time.Duration) error {
	return &cdc.FailedOverError{Source: "src", Slot: "reshard_m1", Was: cdc.SourceIdentity{SystemID: "7", Timeline: 1}, Now: cdc.SourceIdentity{SystemID: "7", Timeline: 2}, SlotMissing: true}
}
func (drainFailsOver) AdvanceSequences(context.Context) error  { return nil }
func (drainFailsOver) Publish(context.Context) (int64, error)  { return 0, errors.New("not reached") }
func (drainFailsOver) Published(context.Context) (bool, error) { return false, nil }
func (drainFailsOver) UnfenceTarget(context.Context) error     { return nil }
func (a drainFailsOver) UnfenceSource(context.Context) error {
	if a.sourceDown {
		return errors.New("connect to src: connection refused")
	}
	return nil
}

type memJournal struct{ steps []cutover.Step }

func (j *memJournal) Record(_ context.Context, s cutover.Step, _ string) error {
	j.steps = append(j.steps, s)
	return nil
}

func (j *memJournal) Last(context.Context) (cutover.Step, error) {
	if len(j.steps) == 0 {
		return "", nil
	}
	return j.steps[len(j.steps)-1], nil
}

// TestCutoverFailoverThatLeftTheSourceFencedIsRetried: a failover met by
// the drain aborts the attempt (ErrTypeCutoverAborted once the source is
// unfenced). When the abort cannot unfence the source, the activity's
// error is no ErrTypeFailedOver (the workflow would recover the move with
// the source fenced) but a retryable one: the activity's next try settles
// the attempt (cutover.Resume unfences) before anything else.
func TestCutoverFailoverThatLeftTheSourceFencedIsRetried(t *testing.T) {
	for n, v := range map[*time.Duration]time.Duration{&cutover.UnfenceFor: 100 * time.Millisecond, &cutover.UnfenceTry: 20 * time.Millisecond} {
		was := *n
		*n = v
		t.Cleanup(func() { *n = was })
	}
	ctx := context.Background()

	j := &memJournal{}
	_, err := cutover.Run(ctx, drainFailsOver{sourceDown: true}, j, cutover.Options{Budget: time.Second})
	if !errors.Is(err, cdc.ErrFailedOver) || errors.Is(err, cutover.ErrAborted) {
		t.Fatalf("attempt whose unfence failed: %v, want the failover without ErrAborted", err)
	}
	if last, _ := j.Last(ctx); last != cutover.StepFenceSource {
		t.Fatalf("journal ends at %q, want %q (fenced, not settled)", last, cutover.StepFenceSource)
	}
	got := classify(runError("m1", err))
	var appErr *temporal.ApplicationError
	if errors.As(got, &appErr) && (appErr.NonRetryable() || appErr.Type() == workflows.ErrTypeFailedOver) {
		t.Fatalf("activity error %v (type %s, non-retryable %v): want a retryable error, not the failover", got, appErr.Type(), appErr.NonRetryable())
	}
	t.Logf("source left fenced: %v", got)

	// Unfenced: the abort, as before.
	_, err = cutover.Run(ctx, drainFailsOver{}, &memJournal{}, cutover.Options{Budget: time.Second})
	if got := runError("m1", err); !errors.Is(got, cutover.ErrAborted) || !errors.Is(got, cdc.ErrFailedOver) {
		t.Fatalf("attempt aborted with the source unfenced: %v, want ErrAborted", got)
	}
}
