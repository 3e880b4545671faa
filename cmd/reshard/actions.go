package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/request"
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
// the workers' reports in the control database too when it answers within
// 2s. Without the control database (the actions need only Temporal),
// Temporal's answer stands.
func workerRuns(ctx context.Context, tc client.Client, cfg *clusterConfig) (bool, error) {
	if cfg == nil || cfg.Control == "" {
		return control.WorkerRuns(ctx, tc, nil)
	}
	return control.WorkerRuns(ctx, tc, func(ctx context.Context) ([]topology.Worker, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		store, closeStore, err := cfg.smallControl(rctx, 1)
		if err != nil {
			return nil, err
		}
		defer closeStore()
		return store.Workers(rctx, workflows.TaskQueue)
	})
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

func freshRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sendAction sends one Update and waits for its outcome.
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
		reqID = freshRequestID()
	}
	ctx := cmd.Context()
	tc, err := cfg.dialTemporal(ctx, opts)
	if err != nil {
		return err
	}
	defer tc.Close()
	wfID := workflows.MigrationWorkflowID(id)
	// Temporal holds an Update until a worker runs the workflow, however
	// long that takes: sent with no worker, it would be applied at some
	// later moment nobody chose. Refuse instead, sending nothing.
	polls, err := workerRuns(ctx, tc, cfg)
	if err != nil {
		return err
	}
	if !polls {
		if err := workflowGone(ctx, tc, id, wfID, verb); err != nil {
			return err
		}
		return fmt.Errorf("%s %s: %s; nothing was sent", verb, id, noWorker(cfg))
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	uid := control.UpdateID(verb, id, reqID)
	res, err := control.Update(ctx, tc, wfID, update, uid, args)
	if err == nil {
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
			}{verb, id, reqID, uid, res, actionNextSteps(verb, id)})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %v\n", verb, id, res)
		printNextSteps(cmd.OutOrStdout(), actionNextSteps(verb, id))
		return nil
	}
	var rej *control.Rejected
	if errors.As(err, &rej) {
		return rejectedAs(rejectedError{rej.Reason}, verb, update)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		if err := workflowGone(cmd.Context(), tc, id, wfID, verb); err != nil {
			return err
		}
		return usageError{fmt.Errorf("no migration %s (workflow %s not found); reshard list shows them", id, wfID)}
	}
	// The service may give up on the update just before our own deadline
	// fires: that is the same "no answer".
	if ctx.Err() != nil || control.Unanswered(err) && cmd.Context().Err() == nil {
		listed := "reshard status " + id + " lists it while it waits"
		if rerr := recordPending(cmd.Context(), cfg, topology.Request{UpdateID: uid, MigrationID: id, Verb: verb, RequestID: reqID}); rerr != nil {
			listed = "reshard status cannot list it (" + rerr.Error() + ")"
		}
		return pendingError{fmt.Sprintf("%s %s: pending, not applied yet: the request was sent and Temporal holds it, but no worker answered within %s. "+
			"It is applied (or rejected by the workflow's checks) when a worker runs the workflow; check that reshard worker runs on task queue %q; "+
			"%s. A retry with --request-id %s is the same request, applied at most once",
			verb, id, f.timeout, workflows.TaskQueue, listed, reqID)}
	}
	return fmt.Errorf("%s %s: %w (retry with --request-id %s)", verb, id, err, reqID)
}

// workflowGone is the error for a migration whose workflow does not exist
// or has ended (nil while it runs or when Temporal cannot tell).
func workflowGone(ctx context.Context, tc client.Client, id, wfID, verb string) error {
	run, err := control.Describe(ctx, tc, wfID, 10*time.Second)
	switch {
	case err != nil:
		return nil
	case !run.Found:
		return usageError{fmt.Errorf("no migration %s (workflow %s not found); reshard list shows them. If the control database knows it (its history is lost), reshard recover %s brings the cluster back to a clean state", id, wfID, id)}
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
	return rejectedError{msg}
}

// rejectedAs names the verb the operator typed where the workflow's reason
// names its Update ("approve-cutover is accepted when ..." is the reason
// approve gives).
func rejectedAs(rej rejectedError, verb, update string) rejectedError {
	if update != verb {
		rej.reason = strings.ReplaceAll(rej.reason, update, verb)
	}
	return rej
}
