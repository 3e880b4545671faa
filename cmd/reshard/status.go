package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/workflows"
)

func newStatusCmd(opts *globalOptions) *cobra.Command {
	var (
		cf       configFlags
		watch    bool
		asJSON   bool
		interval time.Duration
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status [<id>] [--watch] [--json]",
		Short: "Progress of a migration: every move's phase, rows copied, lag, ETA, verify, write pause",
		Long: `Asks the Migration workflow for its state (the "state" query, answered by a
running reshard worker) and prints one line per move: source → target, phase,
rows copied against the estimate, CDC lag, ETA, the verify result and the
write pause of its cutover. Without an id: the newest running migration.

--watch redraws every --interval until the migration ends: progress bars on a
terminal, a line per change otherwise.

Exit codes: 0 ok, 1 failure (no worker answered, Temporal unreachable, the
migration ended FAILED or ROLLED_BACK), 2 bad input (unknown id).`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < 100*time.Millisecond {
				return usageError{fmt.Errorf("--interval %s: want 100ms or more", interval)}
			}
			cfg, err := cf.load(opts)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			tc, err := cfg.dialTemporal(ctx, opts)
			if err != nil {
				return err
			}
			defer tc.Close()
			var id string
			if len(args) == 1 {
				id = migrationIDArg(args[0]) // a workflow id (reshard-<id>) too
			} else if id, err = control.NewestRunning(ctx, tc); err != nil {
				return err
			}
			wfID := workflows.MigrationWorkflowID(id)
			out := cmd.OutOrStdout()
			link := cfg.uiLink(wfID, runIDOf(ctx, tc, wfID))
			if !watch {
				// A query nobody can answer waits its whole --timeout: ask
				// first whether a worker runs.
				var st workflows.MigrationState
				if runs, werr := workerRuns(ctx, tc, cfg); werr == nil && !runs {
					err = noMigrationIsBadInput(control.NoWorkerToAsk(ctx, tc, wfID, noWorker(cfg)))
				} else {
					st, err = queryState(ctx, tc, wfID, timeout)
				}
				// Requests Temporal holds for a worker: shown also (above
				// all) when no worker answers the query.
				pending, perr := pendingRequests(ctx, cfg, tc, id, wfID)
				if err != nil {
					printPending(cmd.ErrOrStderr(), pending, time.Now())
					return err
				}
				if asJSON {
					if err := topoWriteJSON(out, statusJSON{ID: id, WorkflowID: wfID, UI: link, State: st, Pending: pending, NextSteps: nextSteps(id, st)}); err != nil {
						return err
					}
				} else {
					statusview.Print(out, id, link, st, time.Now())
					printPending(out, pending, time.Now())
					statusview.PrintNextSteps(out, nextSteps(id, st))
					if perr != nil {
						fmt.Fprintf(out, "pending requests: not read (%v)\n", perr)
					}
				}
				return endedBadly(id, st)
			}
			return watchStatus(ctx, out, tc, id, interval, timeout, asJSON)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw until the migration ends")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON (with --watch: one object per line and interval)")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval of --watch")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for a worker to answer")
	return cmd
}

// endedBadly is status's verdict on a migration that ended without doing
// its job: FAILED or ROLLED_BACK exit 1, so that a script (or an operator
// who reads only the exit code) is not told all is well.
func endedBadly(id string, st workflows.MigrationState) error {
	switch st.Phase {
	case workflows.PhaseFailed:
		return fmt.Errorf("migration %s failed: %s", id, st.Error)
	case workflows.PhaseRolledBack:
		return fmt.Errorf("migration %s was rolled back: every move undone, the topology is the one before it", id)
	}
	return nil
}

type statusJSON struct {
	ID         string                   `json:"id"`
	WorkflowID string                   `json:"workflow_id"`
	UI         string                   `json:"ui,omitempty"`
	Time       time.Time                `json:"time,omitzero"`
	State      workflows.MigrationState `json:"state"`
	// Pending: operator requests sent that no worker has answered yet.
	Pending []control.Pending `json:"pending,omitempty"`
	// NextSteps are the commands an operator would run next (nextSteps).
	NextSteps []string `json:"next_steps"`
}

// queryState asks the workflow for its MigrationState (control.State)
// and adds the live figures of its running activities (addRetries).
func queryState(ctx context.Context, tc client.Client, wfID string, timeout time.Duration) (workflows.MigrationState, error) {
	st, err := control.State(ctx, tc, wfID, timeout)
	if err != nil {
		return st, noMigrationIsBadInput(err)
	}
	addRetries(ctx, tc, wfID, &st, time.Now())
	return st, nil
}

// noMigrationIsBadInput: a migration Temporal does not know is bad input.
func noMigrationIsBadInput(err error) error {
	var nm *control.NoMigration
	if errors.As(err, &nm) {
		return usageError{err}
	}
	return err
}

// addRetries fills the live figures of a running migration and of its
// running moves from their workflows' pending activities
// (statusview.AddLive). A describe that fails leaves the field empty: this
// is a hint, the state is what counts.
func addRetries(ctx context.Context, tc client.Client, wfID string, st *workflows.MigrationState, now time.Time) {
	statusview.AddLive(st, wfID, statusview.Sources{
		Pending:   func(id string) []*workflowpb.PendingActivityInfo { return control.PendingActivities(ctx, tc, id) },
		MoveState: func(id string) (workflows.MoveState, bool) { return control.MoveState(ctx, tc, id) },
	}, now)
}

// watchStatus polls the state every interval until the migration reaches a
// terminal phase or its workflow closes.
func watchStatus(ctx context.Context, out io.Writer, tc client.Client, id string, interval, timeout time.Duration, asJSON bool) error {
	wfID := workflows.MigrationWorkflowID(id)
	w := statusview.NewWatch(out, id, !asJSON && statusview.Terminal(out))
	defer w.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		st, err := queryState(ctx, tc, wfID, timeout)
		if err != nil {
			return err
		}
		if asJSON {
			if err := topoWriteJSON(out, statusJSON{ID: id, WorkflowID: wfID, Time: time.Now(), State: st, NextSteps: nextSteps(id, st)}); err != nil {
				return err
			}
		} else {
			w.Show(st, time.Now())
		}
		if st.Phase.Terminal() {
			return endedBadly(id, st)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
