package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/request"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// rejectedError is an operator action the workflow refused (its validator or
// handler said no): exit code 3.
type rejectedError struct{ reason string }

func (e rejectedError) Error() string { return "rejected: " + e.reason }

// ExitCode is read by exitCode in root.go.
func (rejectedError) ExitCode() int { return 3 }

// action is one operator verb and the Update it sends.
type action struct {
	verb, update, short, long string
}

var actions = []action{
	{"pause", workflows.UpdatePause, "Pause a migration's copy and verify (CDC keeps the slot drained)", ""},
	{"resume", workflows.UpdateResume, "Resume a paused migration, or run again the phase of a move stopped by an error",
		"A move that meets an error no retry fixes before CUTOVER (a primary-key collision with a row the target owns, a schema change) stops in its phase; status shows why. Fix the cause, then resume runs that phase again; or roll back."},
	{"approve", workflows.UpdateApprove, "Approve the cutover of a migration started with --require-approval", "Accepted in VERIFY (passed) or CUTOVER."},
	{"rollback", workflows.UpdateRollback, "Roll a migration back: the old owners keep (or get back) every range", "Any phase before CLEANUP. Before cutover the copies are dropped; in GRACE the cutover is reversed."},
	{"complete", workflows.UpdateComplete, "End GRACE now and clean up (no rollback after this)", ""},
	{"reverify", workflows.UpdateReverify, "Verify again after a failed verify", ""},
}

const actionExitCodes = `<id> is the migration id or its workflow id, reshard-<id>.

Before sending, the command asks Temporal whether a reshard worker polls the
task queue; with none it refuses and sends nothing (exit 1).

Exit codes: 0 done, 1 failure (Temporal unreachable, no worker polling: nothing
was sent), 2 bad input (unknown migration), 3 rejected by the workflow (the
reason is printed: the action makes no sense in the current phase), 4 sent but
not answered within --timeout: the request is pending in Temporal and is
applied (or rejected) when a worker runs the workflow; retrying with the same
--request-id is the same request, applied at most once.`

// pendingError is an action Temporal holds but no worker answered within
// --timeout: it is applied when a worker runs the workflow. Exit code 4.
type pendingError struct{ msg string }

func (e pendingError) Error() string { return e.msg }

// ExitCode is read by exitCode in root.go.
func (pendingError) ExitCode() int { return 4 }

// workerRuns says whether a worker runs now (control.WorkerRuns), asking
// the workers' reports in the control database too (workerReports).
func workerRuns(ctx context.Context, tc client.Client, cfg *clusterConfig) (bool, error) {
	return control.WorkerRuns(ctx, tc, workerReports(cfg))
}

// workerReports are the workers' reports in the control database
// (control.Reports: within 2s). Without the control database (the actions
// need only Temporal), nil: Temporal's answer stands.
func workerReports(cfg *clusterConfig) control.Workers {
	if cfg == nil || cfg.Control == "" {
		return nil
	}
	return control.Reports(func(ctx context.Context) (*topology.Store, func(), error) { return cfg.smallControl(ctx, 1) })
}

// noWorker says that no worker polls and how to start one.
func noWorker(cfg *clusterConfig) string {
	return fmt.Sprintf("no reshard worker polls task queue %q of namespace %s at %s: start one (reshard worker --config %s)",
		workflows.TaskQueue, cfg.Temporal.Namespace, cfg.Temporal.Address, cfg.Path)
}

// actionFlags are shared by every operator verb.
type actionFlags struct {
	cf        configFlags
	requestID string
	timeout   time.Duration
	asJSON    bool
}

func (f *actionFlags) register(cmd *cobra.Command) {
	f.cf.register(cmd)
	cmd.Flags().StringVar(&f.requestID, "request-id", "", "idempotency key: the same verb, id and request id is applied once (default: fresh)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the workflow to accept and finish the action")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, `print {"verb","id","request_id","update_id","result"}`)
}

// newActionCmds returns pause, resume, approve, rollback, complete, reverify.
func newActionCmds(opts *globalOptions) []*cobra.Command {
	var cmds []*cobra.Command
	for _, a := range actions {
		var f actionFlags
		cmd := &cobra.Command{
			Use:   a.verb + " <id>",
			Short: a.short,
			Long:  a.short + ". " + a.long + "\n\n" + actionExitCodes,
			Args:  usageArgs(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, args []string) error {
				return sendAction(cmd, opts, f, a.verb, a.update, args[0], nil)
			},
		}
		cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
		f.register(cmd)
		cmds = append(cmds, cmd)
	}
	return cmds
}

func newThrottleCmd(opts *globalOptions) *cobra.Command {
	var (
		f actionFlags
		t request.Throttle
	)
	cmd := &cobra.Command{
		Use:   "throttle <id> [--rows-per-sec N] [--bytes-per-sec N] [--copy-chunk-rows N] [--max-source-latency-increase P] [--max-replica-lag D] ...",
		Short: "Change the copy throttle of a running migration (0: unlimited)",
		Long: "Change the copy and verify throttle of every move of a running migration; 0 means unlimited. " +
			"--copy-chunk-rows changes the copy's chunk size from the next chunk on (0: the migration's own).\n\n" +
			"The adaptive flags (--max-source-latency-increase, --max-probe-latency, --max-replica-lag, --max-slot-wal, " +
			"--max-active-backends, --probe-query) replace the adaptive limits as a whole: those not given are no longer watched " +
			"(all 0: adaptive throttle off). Given alone, they keep the rates; the rate flags alone keep the adaptive limits. " +
			"Copy slices take a change at their next start (at most --copy-slice later); a verify or cleanup running takes it at its next start.\n\n" + actionExitCodes,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := throttleUpdate(cmd.Flags(), t)
			if err != nil {
				return usageError{err}
			}
			return sendAction(cmd, opts, f, "throttle", workflows.UpdateThrottle, args[0], []any{u})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f.register(cmd)
	cmd.Flags().Float64Var(&t.RowsPerSec, "rows-per-sec", 0, "rows per second per move (0: unlimited)")
	cmd.Flags().Float64Var(&t.BytesPerSec, "bytes-per-sec", 0, "bytes per second per move (0: unlimited)")
	cmd.Flags().IntVar(&t.ChunkRows, "copy-chunk-rows", 0, "rows per copy chunk from the next chunk on (0: the migration's --copy-chunk-rows)")
	registerAdaptive(cmd.Flags(), &t.Adaptive)
	return cmd
}

// throttleUpdate is the throttle update of reshard throttle's flags
// (request.ThrottleUpdate), marking which were given.
func throttleUpdate(fl *pflag.FlagSet, t request.Throttle) (workflows.Throttle, error) {
	t.RowsSet, t.BytesSet, t.ChunkSet = fl.Changed("rows-per-sec"), fl.Changed("bytes-per-sec"), fl.Changed("copy-chunk-rows")
	t.AdaptiveSet = adaptiveChanged(fl)
	return request.ThrottleUpdate(t)
}

// sendAction sends one Update and waits for its outcome (control.Act).
func sendAction(cmd *cobra.Command, opts *globalOptions, f actionFlags, verb, update, id string, args []any) error {
	id = migrationIDArg(id)
	if !idPattern.MatchString(id) {
		return usageError{fmt.Errorf("migration id %q: want lower-case letters, digits and '-' (reshard list shows them)", id)}
	}
	if f.timeout <= 0 {
		return usageError{fmt.Errorf("--timeout %s: want more than 0", f.timeout)}
	}
	cfg, err := f.cf.load(opts)
	if err != nil {
		return err
	}
	reqID := f.requestID
	if reqID == "" {
		reqID = control.NewRequestID()
	}
	ctx := cmd.Context()
	tc, err := cfg.dialTemporal(ctx, opts)
	if err != nil {
		return err
	}
	defer tc.Close()
	a := control.Action{Verb: verb, Update: update, ID: id, RequestID: reqID, Args: args, Timeout: f.timeout, NoWorker: noWorker(cfg)}
	res, err := control.Act(ctx, tc, a, workerReports(cfg), func(ctx context.Context, r topology.Request) error { return recordPending(ctx, cfg, r) })
	if err != nil {
		return actionErr(err)
	}
	if res == nil {
		res = "done"
	}
	if f.asJSON {
		return topoWriteJSON(cmd.OutOrStdout(), struct {
			Verb      string   `json:"verb"`
			ID        string   `json:"id"`
			RequestID string   `json:"request_id"`
			UpdateID  string   `json:"update_id"`
			Result    any      `json:"result"`
			NextSteps []string `json:"next_steps"`
		}{verb, id, reqID, control.UpdateID(verb, id, reqID), res, statusview.ActionNextSteps(verb, id)})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %v\n", verb, id, res)
	statusview.PrintNextSteps(cmd.OutOrStdout(), statusview.ActionNextSteps(verb, id))
	return nil
}

// actionErr gives control's refusals their exit codes: an unknown
// migration is bad input (2), a refusal or an ended migration rejected
// (3), a request Temporal holds pending (4).
func actionErr(err error) error {
	var (
		rej  *control.Rejected
		end  *control.Ended
		held *control.Held
	)
	switch {
	case errors.As(err, &rej):
		return rejectedError{rej.Reason}
	case errors.As(err, &end):
		return rejectedError{end.Reason}
	case errors.As(err, &held):
		return pendingError{held.Msg}
	}
	return noMigrationIsBadInput(err)
}
