package control

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/reshard/reshard/topology"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// Rejected is an Update the workflow refused: its validator or handler
// said no, with the reason.
type Rejected struct{ Reason string }

func (e *Rejected) Error() string { return "rejected: " + e.Reason }

// NewRequestID is a fresh idempotency key, for an action sent without one.
func NewRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// UpdateID is deterministic in (verb, migration, request id): a retried
// call with the same request id is the same Update, applied at most once.
func UpdateID(verb, id, requestID string) string {
	h := sha256.Sum256([]byte(verb + "\x00" + id + "\x00" + requestID))
	return "cli-" + verb + "-" + hex.EncodeToString(h[:12])
}

// Update sends Update name with args to workflow wfID under update id uid
// and waits until it completed, returning its result. The workflow's
// refusal is a *Rejected; a workflow Temporal does not know a
// *serviceerror.NotFound; no answer within ctx's deadline is ctx's error or
// what Unanswered recognises.
func Update(ctx context.Context, tc client.Client, wfID, name, uid string, args []any) (any, error) {
	h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID:     uid,
		WorkflowID:   wfID,
		UpdateName:   name,
		Args:         args,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return nil, asRejection(err)
	}
	var res any
	if err := h.Get(ctx, &res); err != nil {
		return nil, asRejection(err)
	}
	return res, nil
}

// asRejection turns an error raised by the workflow (validator or handler)
// into a *Rejected; transport and server errors pass through.
func asRejection(err error) error {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return &Rejected{app.Message()}
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return &Rejected{"the workflow cancelled the update"}
	}
	return err
}

// Unanswered says whether err is the service giving up on an Update before
// any worker answered it (it may do so just before the caller's own
// deadline fires): the Update is held, not refused.
func Unanswered(err error) bool {
	var noAnswer *client.WorkflowUpdateServiceTimeoutOrCanceledError
	return errors.As(err, &noAnswer)
}

// Abandoned says whether err is a call given up (cancelled, or past its
// deadline) rather than refused.
func Abandoned(err error) bool {
	var canceled *serviceerror.Canceled
	var deadline *serviceerror.DeadlineExceeded
	if errors.As(err, &canceled) || errors.As(err, &deadline) {
		return true
	}
	c := grpcstatus.Code(err)
	return c == codes.Canceled || c == codes.DeadlineExceeded
}

// UpdateWaiting asks Temporal about one Update, within a second: still
// waiting for a worker, or lost (Temporal does not know it: its server
// restarted, or the workflow ended, before a worker took it). An Update
// with an outcome, applied or rejected, is neither.
func UpdateWaiting(ctx context.Context, tc client.Client, wfID, uid string) (waiting, lost bool) {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := tc.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{WorkflowID: wfID, UpdateID: uid}).Get(pctx, nil)
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return false, true
	case err != nil && (pctx.Err() != nil || Unanswered(err) || Abandoned(err)):
		return true, false
	}
	return false, false
}

// Pending is an operator request Temporal holds for a migration and no
// worker has answered yet, as status shows it.
type Pending struct {
	Verb      string    `json:"verb"`
	RequestID string    `json:"request_id"`
	UpdateID  string    `json:"update_id"`
	SentAt    time.Time `json:"sent_at"`
	// Lost: Temporal no longer knows the request (its server restarted,
	// or the workflow ended, before a worker took it): it was not applied.
	Lost bool `json:"lost,omitempty"`
}

// PendingOf are the requests of recorded (the control database's record of
// the requests sent to workflow wfID, topology.Store.Requests) that
// Temporal still holds unanswered or has lost, each asked of Temporal at
// once, in the order they were sent.
func PendingOf(ctx context.Context, tc client.Client, wfID string, recorded []topology.Request) []Pending {
	var (
		mu      sync.Mutex
		pending []Pending
		wg      sync.WaitGroup
	)
	for _, r := range recorded {
		wg.Go(func() {
			waiting, lost := UpdateWaiting(ctx, tc, wfID, r.UpdateID)
			if !waiting && !lost {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			pending = append(pending, Pending{Verb: r.Verb, RequestID: r.RequestID, UpdateID: r.UpdateID, SentAt: r.SentAt, Lost: lost})
		})
	}
	wg.Wait()
	slices.SortFunc(pending, func(a, b Pending) int { return a.SentAt.Compare(b.SentAt) })
	return pending
}
