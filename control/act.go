package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// Action is one operator verb sent to a migration as an Update.
type Action struct {
	Verb, Update string // what the operator typed; the Update it sends
	ID           string // the migration id
	RequestID    string // the idempotency key: the same one is the same request
	Args         []any
	Timeout      time.Duration // how long to wait for the workflow's answer
	// NoWorker says that no worker polls and how to start one.
	NoWorker string
}

// Ended is a migration whose workflow has ended: there is nothing to act
// on (the operator's action is refused, as the workflow would refuse it).
type Ended struct{ Reason string }

func (e *Ended) Error() string { return "rejected: " + e.Reason }

// Held is an action Temporal holds but no worker answered within its
// timeout: it is applied when a worker runs the workflow.
type Held struct{ Msg string }

func (e *Held) Error() string { return e.Msg }

// Act sends action a and waits for its outcome (the Update's result). With
// no worker running (WorkerRuns with reports) it sends nothing. The
// refusals are typed: *NoMigration (bad input), *Rejected (the workflow
// said no; its reason names a.Verb), *Ended, *Held (sent, not answered:
// record remembers it for status, best effort).
func Act(ctx context.Context, tc client.Client, a Action, reports Workers, record func(context.Context, topology.Request) error) (any, error) {
	wfID := workflows.MigrationWorkflowID(a.ID)
	// Temporal holds an Update until a worker runs the workflow, however
	// long that takes: sent with no worker, it would be applied at some
	// later moment nobody chose. Refuse instead, sending nothing.
	polls, err := WorkerRuns(ctx, tc, reports)
	if err != nil {
		return nil, err
	}
	if !polls {
		if err := gone(ctx, tc, a.ID, wfID, a.Verb); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s %s: %s; nothing was sent", a.Verb, a.ID, a.NoWorker)
	}
	uctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	uid := UpdateID(a.Verb, a.ID, a.RequestID)
	res, err := Update(uctx, tc, wfID, a.Update, uid, a.Args)
	if err == nil {
		return res, nil
	}
	var rej *Rejected
	if errors.As(err, &rej) {
		return nil, rej.as(a.Verb, a.Update)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		if err := gone(ctx, tc, a.ID, wfID, a.Verb); err != nil {
			return nil, err
		}
		return nil, &NoMigration{ID: a.ID, WorkflowID: wfID}
	}
	// The service may give up on the update just before our own deadline
	// fires: that is the same "no answer".
	if uctx.Err() != nil || Unanswered(err) && ctx.Err() == nil {
		listed := "reshard status " + a.ID + " lists it while it waits"
		if rerr := record(ctx, topology.Request{UpdateID: uid, MigrationID: a.ID, Verb: a.Verb, RequestID: a.RequestID}); rerr != nil {
			listed = "reshard status cannot list it (" + rerr.Error() + ")"
		}
		return nil, &Held{fmt.Sprintf("%s %s: pending, not applied yet: the request was sent and Temporal holds it, but no worker answered within %s. "+
			"It is applied (or rejected by the workflow's checks) when a worker runs the workflow; check that reshard worker runs on task queue %q; "+
			"%s. A retry with --request-id %s is the same request, applied at most once",
			a.Verb, a.ID, a.Timeout, workflows.TaskQueue, listed, a.RequestID)}
	}
	return nil, fmt.Errorf("%s %s: %w (retry with --request-id %s)", a.Verb, a.ID, err, a.RequestID)
}

// as names the verb the operator typed where the workflow's reason names
// its Update ("approve-cutover is accepted when ..." is the reason approve
// gives).
func (e *Rejected) as(verb, update string) *Rejected {
	return &Rejected{Reason: strings.ReplaceAll(e.Reason, update, verb)}
}

// gone is the error for a migration whose workflow does not exist
// (*NoMigration) or has ended (*Ended); nil while it runs or when Temporal
// cannot tell.
func gone(ctx context.Context, tc client.Client, id, wfID, verb string) error {
	run, err := Describe(ctx, tc, wfID, 10*time.Second)
	switch {
	case err != nil:
		return nil
	case !run.Found:
		return &NoMigration{ID: id, WorkflowID: wfID, Hint: fmt.Sprintf(". If the control database knows it (its history is lost), reshard recover %s brings the cluster back to a clean state", id)}
	case run.Running:
		return nil
	}
	// A final phase names how it ended: a rolled-back migration is "failed"
	// to Temporal. A terminated one keeps the phase it was in.
	ended, phase := run.Status, workflows.Phase(run.Phase)
	if phase.Terminal() {
		ended = run.Phase
	}
	msg := fmt.Sprintf("migration %s has ended (%s); nothing to %s", id, ended, verb)
	if phase != workflows.PhaseDone && phase != workflows.PhaseRolledBack {
		// Terminated, reset, failed: it may have left ranges migrating,
		// slots, copies and guards behind.
		msg += fmt.Sprintf(". It may have left work behind (reshard topology check says): reshard recover %s brings the cluster back to a clean state", id)
	}
	return &Ended{msg}
}
