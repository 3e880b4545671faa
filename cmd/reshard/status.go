package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-runewidth"
	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/term"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

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
					printMigrationStatus(out, id, link, st, time.Now())
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
	ms, err := listMigrations(ctx, tc, fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", workflows.MigrationWorkflow), 0)
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
	if ctx.Err() == nil && (qctx.Err() != nil || abandoned(err)) {
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

// abandoned reports a call the frontend ended before answering: cancelled
// or past its deadline, as a gRPC status or as the SDK's service error.
func abandoned(err error) bool {
	var canceled *serviceerror.Canceled
	var deadline *serviceerror.DeadlineExceeded
	if errors.As(err, &canceled) || errors.As(err, &deadline) {
		return true
	}
	c := grpcstatus.Code(err)
	return c == codes.Canceled || c == codes.DeadlineExceeded
}

// addRetries fills the Retrying fields of a running migration and of its
// running moves from their workflows' pending activities. A describe that
// fails leaves the field empty: this is a hint, the state is what counts.
func addRetries(ctx context.Context, tc client.Client, wfID string, st *workflows.MigrationState, now time.Time) {
	if st.Phase.Terminal() {
		return
	}
	describe := func(id string) []*workflowpb.PendingActivityInfo {
		d, err := tc.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return nil
		}
		return d.GetPendingActivities()
	}
	st.Retrying = retryText(describe(wfID), now)
	for i := range st.Moves {
		if m := &st.Moves[i]; !m.Phase.Terminal() {
			moveID := workflows.MoveWorkflowID(wfID, m.Spec.ID)
			pending := describe(moveID)
			m.Retrying = retryText(pending, now)
			if w := schemaWaiting(pending); w != "" {
				m.Retrying = strings.TrimPrefix(m.Retrying+"; waiting: "+w, "; ")
			}
			if m.Phase == workflows.PhaseSnapshotCopy && !sliceRunning(pending) {
				// Between two slices, or past the last one: the move has
				// counted the slice's rows, the migration may not have heard
				// yet (it showed 0 rows copied for a second at the end of a
				// demo copy).
				var own workflows.MoveState
				if v, err := tc.QueryWorkflow(ctx, moveID, "", workflows.QueryState); err == nil && v.Get(&own) == nil {
					newerCopy(m, own)
				}
			}
			rows, end := sliceProgress(pending)
			m.RowsCopied += rows
			if !end.IsZero() {
				m.CopyEnd = end
			}
			if a := liveAdaptive(pending); a != nil {
				m.Adaptive = a
			}
			if f := streamFailover(pending); f != "" {
				m.Failover = f
			}
			if m.Phase == workflows.PhaseVerify {
				m.VerifyProgress = verifyProgress(pending)
			}
			liveLag(m, pending)
		}
	}
}

// schemaWaiting is why a pending stream or verify waits for the shards'
// schemas to agree, from its last heartbeat ("" if it does not).
func schemaWaiting(pending []*workflowpb.PendingActivityInfo) string {
	var out []string
	for _, a := range pending {
		if len(a.GetHeartbeatDetails().GetPayloads()) == 0 {
			continue
		}
		var hb map[string]string
		if converter.GetDefaultDataConverter().FromPayloads(a.GetHeartbeatDetails(), &hb) == nil && hb[workflows.HeartbeatWaiting] != "" {
			out = append(out, hb[workflows.HeartbeatWaiting])
		}
	}
	return strings.Join(out, "; ")
}

// liveLag replaces the move's lag with the running forward stream's, from
// its last heartbeat: the figure reshard_cdc_lag_bytes shows. The
// workflow's own is from the last time it asked, in CDC_CATCH_UP (it
// showed 322 KiB through VERIFY and the approval wait while /metrics read
// 0).
func liveLag(m *workflows.MoveState, pending []*workflowpb.PendingActivityInfo) {
	switch m.Phase {
	case workflows.PhaseCDCCatchUp, workflows.PhaseVerify, workflows.PhaseCutover:
	default:
		return
	}
	for _, a := range pending {
		if a.GetActivityType().GetName() != workflows.ActivityRunCDC || a.GetHeartbeatDetails() == nil {
			continue
		}
		var hb map[string]string
		if converter.GetDefaultDataConverter().FromPayloads(a.GetHeartbeatDetails(), &hb) != nil {
			continue
		}
		lag, err := strconv.ParseInt(hb[workflows.HeartbeatLagBytes], 10, 64)
		if err != nil { // an older worker's heartbeat: positions only
			continue
		}
		m.LagBytes = lag
		if t := a.GetLastHeartbeatTime(); t != nil {
			m.LagAt = t.AsTime()
		}
		return
	}
}

// verifyProgress is the running verify's progress from its last heartbeat
// (nil: no verify running, or one from a worker that reports only its
// chunk count).
func verifyProgress(pending []*workflowpb.PendingActivityInfo) *workflows.VerifyProgress {
	for _, a := range pending {
		if a.GetActivityType().GetName() != workflows.ActivityVerify || a.GetHeartbeatDetails() == nil {
			continue
		}
		var hb map[string]int64
		if len(a.GetHeartbeatDetails().GetPayloads()) == 0 ||
			converter.GetDefaultDataConverter().FromPayload(a.GetHeartbeatDetails().GetPayloads()[0], &hb) != nil {
			continue
		}
		if _, ok := hb[workflows.HeartbeatVerifyEstRows]; !ok {
			continue
		}
		p := &workflows.VerifyProgress{Rows: hb[workflows.HeartbeatVerifyRows], EstRows: hb[workflows.HeartbeatVerifyEstRows],
			ChunksDone: hb[workflows.HeartbeatVerifyChunksDone], Chunks: hb[workflows.HeartbeatVerifyChunks]}
		if ms := hb[workflows.HeartbeatVerifyEndMillis]; ms > 0 {
			p.End = time.UnixMilli(ms)
		}
		if t := a.GetLastHeartbeatTime(); t != nil {
			p.HeartbeatAt = t.AsTime()
		}
		return p
	}
	return nil
}

// sliceRunning reports a copy slice among the pending activities.
func sliceRunning(pending []*workflowpb.PendingActivityInfo) bool {
	for _, a := range pending {
		if a.GetActivityType().GetName() == workflows.ActivityCopySlice {
			return true
		}
	}
	return false
}

// newerCopy takes the copy's progress from the move's own state when it is
// further on than the migration's copy of it.
func newerCopy(m *workflows.MoveState, own workflows.MoveState) {
	if own.Spec.ID != m.Spec.ID || own.RowsCopied < m.RowsCopied {
		return
	}
	m.RowsCopied, m.BytesCopied, m.CopyDone, m.CopyEnd = own.RowsCopied, own.BytesCopied, own.CopyDone, own.CopyEnd
}

// sliceProgress is what the running copy slice has committed so far and
// when it should end at its recent rate (zero: no estimate), from its last
// heartbeat (a second or so old): the state's count is the checkpoints' at
// the slice's start, the slice itself reports at its end. The heartbeat
// carries the end as an instant; an older worker's carries only the time
// left at its own time, which the server's record of that heartbeat
// anchors (added to now, it would add the heartbeat's age to the end).
func sliceProgress(pending []*workflowpb.PendingActivityInfo) (rows int64, end time.Time) {
	for _, a := range pending {
		if a.GetActivityType().GetName() != workflows.ActivityCopySlice || a.GetHeartbeatDetails() == nil {
			continue
		}
		var hb map[string]int64
		if converter.GetDefaultDataConverter().FromPayloads(a.GetHeartbeatDetails(), &hb) == nil {
			if ms, ok := hb[workflows.HeartbeatCopyEndMillis]; ok {
				if ms >= 0 {
					end = time.UnixMilli(ms)
				}
			} else if ms, ok := hb[workflows.HeartbeatETAMillis]; ok && ms >= 0 && a.GetLastHeartbeatTime() != nil {
				end = a.GetLastHeartbeatTime().AsTime().Add(time.Duration(ms) * time.Millisecond)
			}
			return hb[workflows.HeartbeatSliceRows], end
		}
	}
	return 0, time.Time{}
}

// streamFailover is the failover the move's running stream (forward or
// reverse) found when it started, from its last heartbeat ("" none): the
// move records it itself only when its catch-up hears of it.
func streamFailover(pending []*workflowpb.PendingActivityInfo) string {
	for _, a := range pending {
		switch a.GetActivityType().GetName() {
		case workflows.ActivityRunCDC, workflows.ActivityRunReverse:
		default:
			continue
		}
		var hb map[string]string
		if a.GetHeartbeatDetails() != nil && converter.GetDefaultDataConverter().FromPayloads(a.GetHeartbeatDetails(), &hb) == nil && hb[workflows.HeartbeatFailover] != "" {
			return hb[workflows.HeartbeatFailover]
		}
	}
	return ""
}

// liveAdaptive is the adaptive throttle of the running copy slice, verify,
// cleanup or rollback, from the second detail of its last heartbeat (nil:
// none).
func liveAdaptive(pending []*workflowpb.PendingActivityInfo) *workflows.AdaptiveStatus {
	for _, a := range pending {
		switch a.GetActivityType().GetName() {
		case workflows.ActivityCopySlice, workflows.ActivityVerify, workflows.ActivityCleanup, workflows.ActivityRollback:
		default:
			continue
		}
		if len(a.GetHeartbeatDetails().GetPayloads()) < 2 {
			continue
		}
		var first converter.RawValue
		var ad *workflows.AdaptiveStatus
		if converter.GetDefaultDataConverter().FromPayloads(a.GetHeartbeatDetails(), &first, &ad) == nil && ad != nil {
			return ad
		}
	}
	return nil
}

// maxFailureText bounds the failure message shown per activity.
const maxFailureText = 240

// retryText describes the pending activities that have failed at least once:
// "CopySlice attempt 4, next in 8s: failed to connect to ...".
func retryText(pending []*workflowpb.PendingActivityInfo, now time.Time) string {
	var parts []string
	for _, a := range pending {
		f := a.GetLastFailure()
		if a.GetAttempt() < 2 || f == nil {
			continue
		}
		s := fmt.Sprintf("%s attempt %d", a.GetActivityType().GetName(), a.GetAttempt())
		if next := a.GetNextAttemptScheduleTime(); next != nil {
			if d := next.AsTime().Sub(now); d > 0 {
				s += fmt.Sprintf(", next in %s", d.Round(time.Second))
			}
		}
		msg := strings.Join(strings.Fields(f.GetMessage()), " ")
		if len(msg) > maxFailureText {
			msg = msg[:maxFailureText] + "…"
		}
		parts = append(parts, s+": "+msg)
	}
	return strings.Join(parts, "; ")
}

func statusText(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// moveView is what status shows of one move.
type moveView struct {
	Name, Phase, Rows, Lag, ETA, Verify, Pause string
	Copied, Est                                int64
}

func viewMove(m workflows.MoveState, throttle workflows.Throttle, now time.Time) moveView {
	v := moveView{Name: m.Spec.Source + " → " + m.Spec.Target, Phase: m.PhaseText(), Copied: m.RowsCopied, Est: m.Spec.EstRows}
	if m.CopyDone && m.RowsCopied > 0 {
		v.Est = m.RowsCopied // the estimate was only an estimate: a finished copy is 100%
	}
	if m.Error != "" {
		v.Phase += ": " + m.Error
	}
	if strings.HasPrefix(m.Retrying, "waiting: ") {
		v.Phase += " (" + m.Retrying + ")" // not a failure: the move waits for the shards' schemas
	} else if m.Retrying != "" {
		v.Phase += " (retrying " + m.Retrying + ")"
	}
	v.Rows = fmt.Sprintf("%d/%d rows", m.RowsCopied, m.Spec.EstRows)
	v.Lag = m.LagText()
	v.ETA = m.ETAText(throttle, now)
	v.Verify = "-"
	if m.Verify != nil {
		v.Verify = m.Verify.Text(now)
	} else if p := m.VerifyProgress; p != nil && m.Phase == workflows.PhaseVerify {
		// The bar, the rows and the ETA are the verify's while it runs.
		v.Verify = p.Text()
		v.Copied, v.Est = p.Rows, p.EstRows
		v.Rows = fmt.Sprintf("%d/%d rows compared", p.Rows, p.EstRows)
		v.ETA = "?"
		if !p.End.IsZero() {
			v.ETA = max(p.End.Sub(now), 0).Round(time.Second).String()
		}
	} else if m.Phase == workflows.PhaseVerify {
		v.Verify = "running"
	}
	v.Pause = m.PauseText()
	if v.Pause == "" {
		v.Pause = "-"
	}
	return v
}

// textBar is a fixed-width bar for one-shot output.
func textBar(copied, est int64, width int) string {
	frac := 0.0
	if est > 0 {
		frac = min(1, float64(copied)/float64(est))
	}
	n := int(frac * float64(width))
	return "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + fmt.Sprintf("] %3.0f%%", 100*frac)
}

func printMigrationStatus(out io.Writer, id, link string, st workflows.MigrationState, now time.Time) {
	r := st.Request
	fmt.Fprintf(out, "migration %s  %s", id, st.Phase)
	if h := st.Headline(); h != "" {
		fmt.Fprintf(out, "  %s", h)
	}
	fmt.Fprintln(out)
	if r.Kind != "" {
		fmt.Fprintf(out, "%s  throttle %s\n", requestText(r), throttleText(st.ThrottleNow()))
	}
	if link != "" {
		fmt.Fprintf(out, "ui %s\n", link)
	}
	if st.Error != "" {
		fmt.Fprintf(out, "error: %s\n", st.Error)
	}
	if st.Retrying != "" {
		fmt.Fprintf(out, "retrying %s\n", st.Retrying)
	}
	if len(st.Moves) == 0 {
		fmt.Fprintln(out, "\nno moves yet (planning)")
		return
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MOVE\tPHASE\tCOPY\tROWS\tLAG\tETA\tVERIFY\tWRITE PAUSE")
	for _, m := range st.Moves {
		v := viewMove(m, st.ThrottleNow(), now)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Phase, textBar(v.Copied, v.Est, 20), v.Rows, v.Lag, v.ETA, v.Verify, v.Pause)
	}
	w.Flush()
	for _, m := range st.Moves {
		if line := predictedText(m, now); line != "" {
			fmt.Fprintf(out, "%s → %s: %s\n", m.Spec.Source, m.Spec.Target, line)
		}
		for _, e := range m.Failovers {
			fmt.Fprintf(out, "move %s: %s\n", m.Spec.ID, e)
		}
	}
}

// predictedText sets a move's phases against what the capacity model
// predicted when it was planned: "copy 3m12s of predicted 3m40s, catch-up
// …". "" for a move planned without a prediction.
func predictedText(m workflows.MoveState, now time.Time) string {
	p := m.Spec.Predicted
	if p == nil {
		return ""
	}
	var parts []string
	for _, ph := range []struct {
		name  string
		phase workflows.Phase
		want  time.Duration
	}{{"copy", workflows.PhaseSnapshotCopy, p.Copy}, {"catch-up", workflows.PhaseCDCCatchUp, p.CatchUp}, {"verify", workflows.PhaseVerify, p.Verify}} {
		want := roundAbout(ph.want)
		if ph.want < 0 {
			want = "never ending"
		}
		took, ok := phaseTook(m, ph.phase, now)
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("%s predicted %s", ph.name, want))
		default:
			parts = append(parts, fmt.Sprintf("%s %s of predicted %s", ph.name, roundAbout(took), want))
		}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; slot WAL predicted %s", workflows.HumanBytes(p.SlotWALBytes))
}

// phaseTook is the time the move spent in phase (so far, while in it),
// summed over its visits; false when it never entered it.
func phaseTook(m workflows.MoveState, phase workflows.Phase, now time.Time) (time.Duration, bool) {
	var (
		d  time.Duration
		ok bool
	)
	for _, t := range m.Timings {
		if t.Phase != phase || t.Start.IsZero() {
			continue
		}
		end := t.End
		if end.IsZero() {
			end = now
		}
		d += end.Sub(t.Start)
		ok = true
	}
	return d, ok
}

// roundAbout rounds a duration for reading: to the second, or the
// millisecond under a second.
func roundAbout(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// requestText says in a few words what a migration does.
func requestText(r workflows.MigrationRequest) string {
	switch r.Kind {
	case workflows.KindSplit:
		return "split " + r.Shard + " into " + r.Into
	case workflows.KindMove:
		return fmt.Sprintf("move %s to %s", r.Range, r.To)
	default:
		return string(r.Kind) + " " + r.Shard
	}
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
	var bars *barView
	if tty {
		bars = newBarView(out, id)
		defer bars.stop()
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
			bars.update(id, st, now)
		default:
			printChanges(out, st, last, now)
			if next := strings.Join(nextSteps(id, st), "  |  "); next != last["next"] && !st.Phase.Terminal() {
				last["next"] = next
				fmt.Fprintf(out, "%s next: %s\n", now.Format("15:04:05"), next)
			}
		}
		if st.Phase.Terminal() {
			if bars != nil {
				bars.stop()
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

// printChanges writes a plain line for the migration and each move whose
// line differs from the last one printed (for logs and pipes).
func printChanges(out io.Writer, st workflows.MigrationState, last map[string]string, now time.Time) {
	emit := func(key, line string) {
		if last[key] != line {
			last[key] = line
			fmt.Fprintf(out, "%s %s\n", now.Format("15:04:05"), line)
		}
	}
	head := fmt.Sprintf("migration %s", st.Phase)
	if h := st.Headline(); h != "" {
		head += "  " + h
	}
	if st.Retrying != "" {
		head += " (retrying " + st.Retrying + ")"
	}
	emit("", head)
	for _, m := range st.Moves {
		v := viewMove(m, st.Request.Throttle, now)
		emit(v.Name, fmt.Sprintf("%s %s %s lag %s eta %s verify %s pause %s", v.Name, v.Phase, v.Rows, v.Lag, v.ETA, v.Verify, v.Pause))
	}
}

// barView is the --watch view on a terminal: one progress bar per move,
// with its phase before and lag, ETA, verify and write pause after.
type barView struct {
	p      *mpb.Progress
	mu     sync.Mutex
	header *mpb.Bar // the migration's own line, above the moves
	bars   map[string]*mpb.Bar
	text   map[string]moveView
	head   string
}

func newBarView(out io.Writer, id string) *barView {
	v := &barView{bars: map[string]*mpb.Bar{}, text: map[string]moveView{}, head: "migration " + id}
	v.p = mpb.New(mpb.WithOutput(out), mpb.WithWidth(100), mpb.WithRefreshRate(200*time.Millisecond), mpb.WithAutoRefresh())
	v.header = v.p.New(0, mpb.NopStyle(), mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.head
	})))
	return v
}

// update sets the texts under the lock and moves the bars outside it: a bar's
// render goroutine calls the decorators, which take the lock.
func (v *barView) update(id string, st workflows.MigrationState, now time.Time) {
	head := fmt.Sprintf("migration %s  %s", id, st.Phase)
	if h := st.Headline(); h != "" {
		head += "  " + h
	}
	if st.Retrying != "" {
		head += "  retrying " + st.Retrying
	}
	v.mu.Lock()
	v.head = head
	v.mu.Unlock()
	for _, m := range st.Moves {
		mv := viewMove(m, st.Request.Throttle, now)
		key := mv.Name
		v.mu.Lock()
		v.text[key] = mv
		b, ok := v.bars[key]
		v.mu.Unlock()
		if !ok {
			get := func() moveView { v.mu.Lock(); defer v.mu.Unlock(); return v.text[key] }
			// total 0: the bar never completes by itself (estimates can be low).
			// The bar's own line holds only short cells (the move, its
			// phase's name, the percentage), so the bar keeps its width
			// whatever the phase says; the figures and the phase's long
			// text (waiting for approval, a failover, an error) go on a
			// line of their own below it, cut to the width.
			b = v.p.AddBar(0,
				mpb.PrependDecorators(
					decor.Any(func(decor.Statistics) string { return get().Name }, decor.WCSyncSpaceR),
					decor.Any(func(decor.Statistics) string { return phaseCell(get().Phase) }, decor.WCSyncSpaceR),
				),
				mpb.AppendDecorators(
					decor.Any(func(decor.Statistics) string {
						t := get()
						pct := 0.0
						if t.Est > 0 {
							pct = min(100, 100*float64(t.Copied)/float64(t.Est))
						}
						return fmt.Sprintf("%3.0f%%", pct)
					}),
				),
				mpb.BarBtmExtender(mpb.BarFillerFunc(func(w io.Writer, stat decor.Statistics) error {
					_, err := io.WriteString(w, figuresLine(get(), stat.AvailableWidth)+"\n")
					return err
				})))
			v.mu.Lock()
			v.bars[key] = b
			v.mu.Unlock()
		}
		if mv.Est > 0 {
			b.SetTotal(max(mv.Est, mv.Copied), false)
		}
		b.SetCurrent(mv.Copied) // the copy's rows, or a running verify's
	}
}

// phaseCellWidth bounds the phase's cell on a bar's line: the longest phase
// name (SNAPSHOT_COPY, CDC_CATCH_UP) fits.
const phaseCellWidth = 13

// phaseCell is the phase's name for the bar's line: the text before its
// details, cut to phaseCellWidth.
func phaseCell(phase string) string {
	if i := strings.IndexAny(phase, " :("); i > 0 {
		phase = phase[:i]
	}
	if len(phase) > phaseCellWidth {
		phase = phase[:phaseCellWidth]
	}
	return phase
}

// figuresLine is the line under a move's bar: its rows, lag, ETA, verify
// and write pause, then the phase's details, cut to width columns.
func figuresLine(t moveView, width int) string {
	line := fmt.Sprintf("    %s  lag %s  eta %s  verify %s  pause %s", t.Rows, t.Lag, t.ETA, t.Verify, t.Pause)
	if rest := strings.TrimSpace(strings.TrimPrefix(t.Phase, phaseCell(t.Phase))); rest != "" {
		line += "  " + rest
	}
	if width > 1 && runewidth.StringWidth(line) > width {
		line = runewidth.Truncate(line, width, "…")
	}
	return line
}

func (v *barView) stop() {
	if v == nil || v.p == nil {
		return
	}
	v.mu.Lock()
	bars := []*mpb.Bar{v.header}
	for _, b := range v.bars {
		bars = append(bars, b)
	}
	v.mu.Unlock()
	for _, b := range bars {
		b.SetTotal(-1, true)
	}
	v.p.Wait()
	v.p = nil
}
