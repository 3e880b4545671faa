package statusview

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/reshard/reshard/workflows"
)

// Sources are where the live figures come from: the pending activities of
// a workflow (its describe; nil when it cannot say) and the state a move
// workflow answers itself (false when it does not).
type Sources struct {
	Pending   func(workflowID string) []*workflowpb.PendingActivityInfo
	MoveState func(moveWorkflowID string) (workflows.MoveState, bool)
}

// AddLive fills what the workflows' state lags behind in st (the state of
// migration workflow wfID), from the last heartbeats of the running
// activities: the retries of the migration and of each running move, a
// move's wait for the shards' schemas, the running copy slice's rows and
// end, the adaptive throttle, a failover a stream found, a running
// verify's progress and the stream's own lag. A terminal migration is left
// as it is.
func AddLive(st *workflows.MigrationState, wfID string, src Sources, now time.Time) {
	if st.Phase.Terminal() {
		return
	}
	st.Retrying = retryText(src.Pending(wfID), now)
	for i := range st.Moves {
		if m := &st.Moves[i]; !m.Phase.Terminal() {
			moveID := workflows.MoveWorkflowID(wfID, m.Spec.ID)
			addMoveLive(m, moveID, src.Pending(moveID), src, now)
		}
	}
}

// addMoveLive is AddLive's work on one running move.
func addMoveLive(m *workflows.MoveState, moveID string, pending []*workflowpb.PendingActivityInfo, src Sources, now time.Time) {
	m.Retrying = retryText(pending, now)
	if w := schemaWaiting(pending); w != "" {
		m.Retrying = strings.TrimPrefix(m.Retrying+"; waiting: "+w, "; ")
	}
	if m.Phase == workflows.PhaseSnapshotCopy && !sliceRunning(pending) {
		// Between two slices, or past the last one: the move has
		// counted the slice's rows, the migration may not have heard
		// yet (it showed 0 rows copied for a second at the end of a
		// demo copy).
		if own, ok := src.MoveState(moveID); ok {
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
// 0). In SNAPSHOT_COPY the stream runs only beside a copy through the
// copy gate (--stream-during-copy).
func liveLag(m *workflows.MoveState, pending []*workflowpb.PendingActivityInfo) {
	switch m.Phase {
	case workflows.PhaseCDCCatchUp, workflows.PhaseVerify, workflows.PhaseCutover:
	case workflows.PhaseSnapshotCopy:
		if !m.StreamDuringCopy {
			return
		}
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

// maxFailureText bounds the failure message shown per activity.
const maxFailureText = 240
