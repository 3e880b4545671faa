package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"golang.org/x/term"

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
			} else if id, err = newestRunning(ctx, tc); err != nil {
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
					err = noWorkerToAsk(ctx, tc, cfg, wfID)
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
					printNextSteps(out, nextSteps(id, st))
					if perr != nil {
						fmt.Fprintf(out, "pending requests: not read (%v)\n", perr)
					}
				}
				return endedBadly(id, st)
			}
			return watchStatus(ctx, out, tc, id, link, interval, timeout, asJSON)
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
	Pending []pendingRequest `json:"pending,omitempty"`
	// NextSteps are the commands an operator would run next (nextSteps).
	NextSteps []string `json:"next_steps"`
}

// newestRunning is the id of the most recently started running migration.
func newestRunning(ctx context.Context, tc client.Client) (string, error) {
	ms, err := listMigrations(ctx, tc, control.RunningMigrations, 0)
	if err != nil {
		return "", err
	}
	if len(ms) == 0 {
		return "", errors.New("no migration is running; give an id (reshard list shows recent ones)")
	}
	return ms[0].ID, nil
}

// queryState asks the workflow for its MigrationState. A workflow that does
// not exist is bad input; one nobody answers for is explained.
func queryState(ctx context.Context, tc client.Client, wfID string, timeout time.Duration) (workflows.MigrationState, error) {
	var st workflows.MigrationState
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := tc.QueryWorkflow(qctx, wfID, "", workflows.QueryState)
	if err == nil {
		err = v.Get(&st)
		if err != nil {
			return st, fmt.Errorf("decode the state of %s: %w", wfID, err)
		}
		addRetries(qctx, tc, wfID, &st, time.Now())
		return st, nil
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return st, usageError{fmt.Errorf("no migration %s (workflow %s not found); reshard list shows them", migrationIDOf(wfID), wfID)}
	}
	// The query's own deadline, or the frontend giving up on it first (a
	// stream reset: codes.Canceled or DeadlineExceeded), with the caller's
	// context alive: no worker answered.
	if ctx.Err() == nil && (qctx.Err() != nil || control.Abandoned(err)) {
		status := "unknown"
		if d, derr := tc.DescribeWorkflowExecution(ctx, wfID, ""); derr == nil {
			status = statusText(d.GetWorkflowExecutionInfo().GetStatus())
		}
		return st, fmt.Errorf("no worker answered the state query of %s within %s (workflow status: %s): is reshard worker running on task queue %q?",
			wfID, timeout, status, workflows.TaskQueue)
	}
	return st, fmt.Errorf("query the state of %s: %w", wfID, err)
}

// noWorkerToAsk is status's answer when no worker runs: the migration does
// not exist (bad input), or no one can answer its state query now.
func noWorkerToAsk(ctx context.Context, tc client.Client, cfg *clusterConfig, wfID string) error {
	d, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return usageError{fmt.Errorf("no migration %s (workflow %s not found); reshard list shows them", migrationIDOf(wfID), wfID)}
	}
	status := "unknown"
	if err == nil {
		status = statusText(d.GetWorkflowExecutionInfo().GetStatus())
	}
	return fmt.Errorf("no worker can answer the state query of %s (workflow status: %s): %s", wfID, status, noWorker(cfg))
}

// addRetries fills the live figures of a running migration and of its
// running moves from their workflows' pending activities
// (statusview.AddLive). A describe that fails leaves the field empty: this
// is a hint, the state is what counts.
func addRetries(ctx context.Context, tc client.Client, wfID string, st *workflows.MigrationState, now time.Time) {
	statusview.AddLive(st, wfID, statusview.Sources{
		Pending: func(id string) []*workflowpb.PendingActivityInfo {
			d, err := tc.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				return nil
			}
			return d.GetPendingActivities()
		},
		MoveState: func(id string) (workflows.MoveState, bool) {
			var own workflows.MoveState
			v, err := tc.QueryWorkflow(ctx, id, "", workflows.QueryState)
			return own, err == nil && v.Get(&own) == nil
		},
	}, now)
}

func statusText(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// watchStatus polls the state every interval until the migration reaches a
// terminal phase or its workflow closes.
func watchStatus(ctx context.Context, out io.Writer, tc client.Client, id, link string, interval, timeout time.Duration, asJSON bool) error {
	wfID := workflows.MigrationWorkflowID(id)
	f, isFile := out.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd())) && !asJSON
	if tty {
		// A pseudo-terminal without a size (script(1) without a terminal
		// behind it) renders no bars: write lines there too.
		w, _, err := term.GetSize(int(f.Fd()))
		tty = err == nil && w > 0
	}
	var bars *statusview.Bars
	if tty {
		bars = statusview.NewBars(out, id)
		defer bars.Stop()
	}
	last := map[string]string{}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		st, err := queryState(ctx, tc, wfID, timeout)
		if err != nil {
			return err
		}
		now := time.Now()
		switch {
		case asJSON:
			if err := topoWriteJSON(out, statusJSON{ID: id, WorkflowID: wfID, Time: now, State: st, NextSteps: nextSteps(id, st)}); err != nil {
				return err
			}
		case tty:
			bars.Update(id, st, now)
		default:
			statusview.PrintChanges(out, st, last, now)
			if next := strings.Join(nextSteps(id, st), "  |  "); next != last["next"] && !st.Phase.Terminal() {
				last["next"] = next
				fmt.Fprintf(out, "%s next: %s\n", now.Format("15:04:05"), next)
			}
		}
		if st.Phase.Terminal() {
			if bars != nil {
				bars.Stop()
				bars = nil
			}
			if !asJSON {
				fmt.Fprintf(out, "migration %s ended: %s\n", id, st.Phase)
				printNextSteps(out, nextSteps(id, st))
			}
			return endedBadly(id, st)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
