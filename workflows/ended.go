package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ErrTypeRolledBack is the type of the error a Migration or a Move ends with
// when it rolled back. Temporal then records the workflow as failed, so its
// list shows a red "Failed" for a migration that put everything back, not a
// green "Completed" for one that did nothing it was asked; ReshardPhase says
// ROLLED_BACK. The error's details carry the final state, as a result would.
const ErrTypeRolledBack = "RolledBack"

// versionRolledBackFails marks the runs that end a rollback with
// ErrTypeRolledBack; histories recorded before it completed with the state.
const versionRolledBackFails = "rolled-back-ends-failed"

// rolledBack is the error a workflow that rolled back returns, with its state.
func rolledBack(what string, state any) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s rolled back: nothing it moved stays moved (its state is in this error's details and in reshard status)", what),
		ErrTypeRolledBack, nil, state)
}

// endsRolledBack reports whether this run ends a rollback with an error.
func endsRolledBack(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionRolledBackFails, workflow.DefaultVersion, 1) == 1
}

// Outcome is how a Migration or a Move ended, given the error its Get
// returned: for one that rolled back, the state is decoded from the error
// into state and Outcome returns nil (the state's phase says ROLLED_BACK);
// any other error is returned as it is.
//
//	err := workflows.Outcome(run.Get(ctx, &st), &st)
func Outcome(err error, state any) error {
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.Type() == ErrTypeRolledBack && app.HasDetails() {
		if derr := app.Details(state); derr != nil {
			return fmt.Errorf("%w (its state could not be read: %v)", err, derr)
		}
		return nil
	}
	return err
}
