package statusview

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/workflows"
	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestRetryText(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	pending := []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: "Verify"}, Attempt: 1}, // running, never failed
		{ActivityType: &commonpb.ActivityType{Name: "CopySlice"}, Attempt: 4, NextAttemptScheduleTime: timestamppb.New(now.Add(8 * time.Second)),
			LastFailure: &failurepb.Failure{Message: "copy: failed to connect to `user=postgres database=reshard`:\n\t127.0.0.1:5433: connection refused"}},
		{ActivityType: &commonpb.ActivityType{Name: "Plan"}, Attempt: 2, LastFailure: &failurepb.Failure{Message: strings.Repeat("x", 500)}},
	}
	got := retryText(pending, now)
	want := "CopySlice attempt 4, next in 8s: copy: failed to connect to `user=postgres database=reshard`: 127.0.0.1:5433: connection refused; Plan attempt 2: " +
		strings.Repeat("x", maxFailureText) + "…"
	if got != want {
		t.Errorf("retry text\n got %q\nwant %q", got, want)
	}
	if got := retryText(pending[:1], now); got != "" {
		t.Errorf("an activity that never failed: %q", got)
	}
	st := workflows.MigrationState{Moves: []workflows.MoveState{{Spec: workflows.MoveSpec{Source: "shard1", Target: "shard3"},
		Phase: workflows.PhaseSnapshotCopy, Retrying: "CopySlice attempt 4: connection refused"}}}
	var b strings.Builder
	Print(&b, "x", "", st, now)
	if !strings.Contains(b.String(), "SNAPSHOT_COPY (retrying CopySlice attempt 4: connection refused)") {
		t.Errorf("status does not show the retry:\n%s", b.String())
	}
}

// A stream or verify that waits for the shards' schemas says so in its
// heartbeat; status shows it as a wait, not as a failure. Other heartbeats
// (a copy slice's counts) are not taken for one.
func TestSchemaWaitingText(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	hb := func(v ...any) *commonpb.Payloads {
		p, err := dc.ToPayloads(v...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	msg := "the applier waits for target shard5 to get column nickname of public.users, which source shard2 has: run reshard schema apply 'ALTER TABLE public.users ADD COLUMN nickname text'"
	pending := []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityCopySlice}, HeartbeatDetails: hb(map[string]int64{workflows.HeartbeatSliceRows: 5}, nil)},
		{ActivityType: &commonpb.ActivityType{Name: "RunCDC"}, HeartbeatDetails: hb(map[string]string{"applied": "0/1", workflows.HeartbeatWaiting: msg})},
		{ActivityType: &commonpb.ActivityType{Name: "RunCDC"}, HeartbeatDetails: hb(map[string]string{"applied": "0/1"})},
	}
	if got := schemaWaiting(pending); got != msg {
		t.Errorf("schemaWaiting = %q, want %q", got, msg)
	}
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	st := workflows.MigrationState{Moves: []workflows.MoveState{{Spec: workflows.MoveSpec{Source: "shard2", Target: "shard5"},
		Phase: workflows.PhaseCDCCatchUp, Retrying: "waiting: " + msg}}}
	var b strings.Builder
	Print(&b, "x", "", st, now)
	if !strings.Contains(b.String(), "CDC_CATCH_UP (waiting: the applier waits for target shard5") || strings.Contains(b.String(), "retrying") {
		t.Errorf("status:\n%s", b.String())
	}
}

// TestStatusShowsVerifyProgress: a move in VERIFY shows the running
// verify's bar, rows compared of the expected, chunks and ETA from the
// verify's heartbeat (it showed "verify -", 100% of the copy and no ETA for
// the 160 s of a 12k-row verify).
func TestStatusShowsVerifyProgress(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	dc := converter.GetDefaultDataConverter()
	var noAdaptive *workflows.AdaptiveStatus
	hb, err := dc.ToPayloads(map[string]int64{"chunks": 2, workflows.HeartbeatVerifyRows: 6000, workflows.HeartbeatVerifyEstRows: 12000,
		workflows.HeartbeatVerifyChunksDone: 3, workflows.HeartbeatVerifyChunks: 6, workflows.HeartbeatVerifyEndMillis: now.Add(80 * time.Second).UnixMilli()}, noAdaptive)
	if err != nil {
		t.Fatal(err)
	}
	pending := []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityRunCDC}},
		{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityVerify}, HeartbeatDetails: hb, LastHeartbeatTime: timestamppb.New(now)},
	}
	p := verifyProgress(pending)
	if p == nil || p.Rows != 6000 || p.EstRows != 12000 || p.ChunksDone != 3 || p.Chunks != 6 || !p.End.Equal(now.Add(80*time.Second)) {
		t.Fatalf("verify progress %+v", p)
	}
	st := workflows.MigrationState{Phase: workflows.PhaseVerify, Moves: []workflows.MoveState{{
		Spec:  workflows.MoveSpec{ID: "m1", Source: "shard1", Target: "shard5", EstRows: 11000},
		Phase: workflows.PhaseVerify, RowsCopied: 12000, CopyDone: true, VerifyProgress: p,
	}}}
	var b strings.Builder
	Print(&b, "x", "", st, now)
	for _, want := range []string{"[==========          ]  50%", "6000/12000 rows compared", "1m20s", "running: 3/6 chunks"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	last := map[string]string{}
	var lines strings.Builder
	PrintChanges(&lines, st, last, now)
	if !strings.Contains(lines.String(), "6000/12000 rows compared lag 0 B eta 1m20s verify running: 3/6 chunks") {
		t.Errorf("--watch line:\n%s", lines.String())
	}

	// An older worker's heartbeat (chunks only) says nothing of the
	// total: no progress, and the verify is shown running.
	old, err := dc.ToPayloads(map[string]int64{"chunks": 2}, noAdaptive)
	if err != nil {
		t.Fatal(err)
	}
	pending[1].HeartbeatDetails = old
	if p := verifyProgress(pending); p != nil {
		t.Errorf("progress from a chunks-only heartbeat: %+v", p)
	}
	st.Moves[0].VerifyProgress = nil
	if v := ViewMove(st.Moves[0], workflows.Throttle{}, now); v.Verify != "running" {
		t.Errorf("a verify running without progress shows %q", v.Verify)
	}
}

// TestStatusLagIsTheStreamsOwn: in VERIFY and CUTOVER (the approval wait)
// status shows the running stream's lag, the figure /metrics shows, not the
// workflow's from the end of CDC_CATCH_UP (322 KiB stayed while /metrics
// read 0); GRACE's header names the current topology version.
func TestStatusLagIsTheStreamsOwn(t *testing.T) {
	now := time.Now()
	hb, err := converter.GetDefaultDataConverter().ToPayloads(map[string]string{"received": "0/3000000", "applied": "0/3000000", "acked": "0/3000000",
		workflows.HeartbeatLagBytes: "0"})
	if err != nil {
		t.Fatal(err)
	}
	pending := []*workflowpb.PendingActivityInfo{{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityRunCDC}, HeartbeatDetails: hb,
		LastHeartbeatTime: timestamppb.New(now)}}
	for _, phase := range []workflows.Phase{workflows.PhaseVerify, workflows.PhaseCutover} {
		m := workflows.MoveState{Phase: phase, LagBytes: 329_728, CopyDone: true}
		liveLag(&m, pending)
		if m.LagText() != "0 B" || m.LagAt.IsZero() {
			t.Errorf("%s: lag %s at %s; want the stream's 0 B", phase, m.LagText(), m.LagAt)
		}
	}
	// In SNAPSHOT_COPY the stream runs only beside a copy with
	// --stream-during-copy: its lag then, "-" without.
	m := workflows.MoveState{Phase: workflows.PhaseSnapshotCopy, LagBytes: 329_728, StreamDuringCopy: true}
	if liveLag(&m, pending); m.LagText() != "0 B" || m.LagAt.IsZero() || !strings.Contains(m.PhaseText(), "stream running beside the copy") {
		t.Errorf("a copy beside its stream: lag %s at %s, phase %q; want the stream's 0 B and the phase saying so", m.LagText(), m.LagAt, m.PhaseText())
	}
	m = workflows.MoveState{Phase: workflows.PhaseSnapshotCopy}
	if liveLag(&m, pending); m.LagText() != "-" || !m.LagAt.IsZero() {
		t.Errorf("a copy before its stream shows lag %s at %s", m.LagText(), m.LagAt)
	}
	m = workflows.MoveState{Phase: workflows.PhaseGrace, LagBytes: 329_728}
	if liveLag(&m, pending); m.LagBytes != 329_728 {
		t.Errorf("GRACE took the forward stream's lag")
	}
	st := workflows.MigrationState{Phase: workflows.PhaseGrace, FromVersion: 1, Version: 6, MovedFraction: 0.2}
	var b strings.Builder
	Print(&b, "x", "", st, now)
	if !strings.HasPrefix(b.String(), "migration x  GRACE  topology v1 → v6  moving 20.00% of the token space\n") {
		t.Errorf("GRACE header:\n%s", b.String())
	}
	st.Phase, st.Version = workflows.PhaseRolledBack, 8
	b.Reset()
	Print(&b, "x", "", st, now)
	if !strings.HasPrefix(b.String(), "migration x  ROLLED_BACK  rolled back: nothing moved (topology v8 has the ring of v1)\n") {
		t.Errorf("rolled back header:\n%s", b.String())
	}
}

// status shows the adaptive throttle of the running copy slice, verify or
// cleanup from the second detail of its heartbeat, in the move's phase text
// (and in --json's state); the first detail stays what it was, so the rows
// are still read.
func TestAdaptiveFromHeartbeat(t *testing.T) {
	ad := &workflows.AdaptiveStatus{RowsPerSec: 3200, Signal: "replica_lag", Reason: "replica lag 3.2s > 2s"}
	dc := converter.GetDefaultDataConverter()
	copyHB, err := dc.ToPayloads(map[string]int64{workflows.HeartbeatSliceRows: 1234, workflows.HeartbeatETAMillis: -1}, ad)
	if err != nil {
		t.Fatal(err)
	}
	verifyHB, err := dc.ToPayloads("verifying", ad)
	if err != nil {
		t.Fatal(err)
	}
	none, err := dc.ToPayloads("verifying", (*workflows.AdaptiveStatus)(nil))
	if err != nil {
		t.Fatal(err)
	}
	pending := func(name string, hb *commonpb.Payloads) []*workflowpb.PendingActivityInfo {
		return []*workflowpb.PendingActivityInfo{{ActivityType: &commonpb.ActivityType{Name: name}, HeartbeatDetails: hb}}
	}
	if rows, _ := sliceProgress(pending(workflows.ActivityCopySlice, copyHB)); rows != 1234 {
		t.Errorf("slice rows %d with the adaptive detail, want 1234", rows)
	}
	for _, tc := range []struct {
		name string
		hb   *commonpb.Payloads
		want *workflows.AdaptiveStatus
	}{
		{workflows.ActivityCopySlice, copyHB, ad},
		{workflows.ActivityVerify, verifyHB, ad},
		{workflows.ActivityCleanup, none, nil},
		{workflows.ActivityRollback, verifyHB, ad},
		{workflows.ActivityRunCDC, verifyHB, nil},
	} {
		got := liveAdaptive(pending(tc.name, tc.hb))
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	m := workflows.MoveState{Phase: workflows.PhaseSnapshotCopy, Adaptive: ad, Spec: workflows.MoveSpec{Source: "s1", Target: "s2"}}
	if v := ViewMove(m, workflows.Throttle{}, time.Now()); v.Phase != "SNAPSHOT_COPY (throttled: replica lag 3.2s > 2s, 3200 rows/s)" {
		t.Errorf("status phase %q", v.Phase)
	}
}

// status shows the failover a move's running stream found, from the
// stream's heartbeat (forward or reverse), in the move's phase text; a
// stream that found none, and other activities, add nothing.
func TestFailoverFromStreamHeartbeat(t *testing.T) {
	const note = "target shard5 failed over at 2026-12-03T10:00:55Z (timeline 1 → 2): resumed from 0/1977EF0, the replication origin's progress on the new primary"
	dc := converter.GetDefaultDataConverter()
	found, err := dc.ToPayloads(map[string]string{"received": "0/1", "applied": "0/1", "acked": "0/1", workflows.HeartbeatFailover: note})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := dc.ToPayloads(map[string]string{"received": "0/1", "applied": "0/1", "acked": "0/1"})
	if err != nil {
		t.Fatal(err)
	}
	pending := func(name string, hb *commonpb.Payloads) []*workflowpb.PendingActivityInfo {
		return []*workflowpb.PendingActivityInfo{{ActivityType: &commonpb.ActivityType{Name: name}, HeartbeatDetails: hb}}
	}
	for _, tc := range []struct {
		name string
		hb   *commonpb.Payloads
		want string
	}{
		{workflows.ActivityRunCDC, found, note},
		{workflows.ActivityRunReverse, found, note},
		{workflows.ActivityRunCDC, quiet, ""},
		{workflows.ActivityRunCDC, nil, ""},
		{workflows.ActivityVerify, found, ""},
	} {
		if got := streamFailover(pending(tc.name, tc.hb)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	m := workflows.MoveState{Phase: workflows.PhaseCutover, Waiting: workflows.WaitApproval, Failover: streamFailover(pending(workflows.ActivityRunCDC, found))}
	if got := m.PhaseText(); !strings.HasPrefix(got, "CUTOVER (waiting for approval") || !strings.Contains(got, "; "+note+")") {
		t.Errorf("phase text %q lacks the failover", got)
	}
	if v := ViewMove(m, workflows.Throttle{}, time.Now()); !strings.Contains(v.Phase, "target shard5 failed over at 2026-12-03T10:00:55Z (timeline 1 → 2)") {
		t.Errorf("status shows %q", v.Phase)
	}
}

// status adds the running copy slice's heartbeat to the move's rows, so the
// count moves every second instead of at the end of each slice, and shows
// the end the heartbeat predicted less its own clock: a heartbeat read 5 s
// after it was recorded shows 5 s less, not the time left it was sent with.
func TestSliceRowsFromHeartbeat(t *testing.T) {
	sent := time.Now().Add(-5 * time.Second).Truncate(time.Millisecond)
	end := sent.Add(42 * time.Second)
	dc := converter.GetDefaultDataConverter()
	hb, err := dc.ToPayloads(map[string]int64{workflows.HeartbeatSliceRows: 1234, workflows.HeartbeatSliceBytes: 99,
		workflows.HeartbeatETAMillis: 42_000, workflows.HeartbeatCopyEndMillis: end.UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	pending := []*workflowpb.PendingActivityInfo{
		{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityRunCDC}},
		{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityCopySlice}, HeartbeatDetails: hb, LastHeartbeatTime: timestamppb.New(sent)},
	}
	if rows, got := sliceProgress(pending); rows != 1234 || !got.Equal(end) {
		t.Errorf("slice rows %d, end %s; want 1234, %s", rows, got, end)
	}
	if rows, got := sliceProgress(pending[:1]); rows != 0 || !got.IsZero() {
		t.Errorf("no copy slice: %d %s", rows, got)
	}
	// An older worker's heartbeat has the time left only: anchored at the
	// server's record of it.
	old, err := dc.ToPayloads(map[string]int64{workflows.HeartbeatSliceRows: 1234, workflows.HeartbeatETAMillis: 42_000})
	if err != nil {
		t.Fatal(err)
	}
	pending[1].HeartbeatDetails = old
	if _, got := sliceProgress(pending); !got.Equal(end) {
		t.Errorf("end from an older heartbeat %s; want %s", got, end)
	}
	// No estimate yet.
	none, err := dc.ToPayloads(map[string]int64{workflows.HeartbeatSliceRows: 5, workflows.HeartbeatETAMillis: -1, workflows.HeartbeatCopyEndMillis: -1})
	if err != nil {
		t.Fatal(err)
	}
	pending[1].HeartbeatDetails = none
	if _, got := sliceProgress(pending); !got.IsZero() {
		t.Errorf("end without an estimate: %s", got)
	}
	now := sent.Add(5 * time.Second)
	m := workflows.MoveState{Spec: workflows.MoveSpec{EstRows: 1000}, Phase: workflows.PhaseSnapshotCopy, RowsCopied: 10, CopyEnd: end}
	if got := ViewMove(m, workflows.Throttle{}, now).ETA; got != "37s" {
		t.Errorf("status ETA %s 5 s after the heartbeat, want the copy's own 42s less 5s", got)
	}
}

// Between two copy slices, or past the last one, status takes the copy's
// progress from the move's own state when the migration's is behind it.
func TestNewerCopyBetweenSlices(t *testing.T) {
	copying := []*workflowpb.PendingActivityInfo{{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityCopySlice}}}
	cdcOnly := []*workflowpb.PendingActivityInfo{{ActivityType: &commonpb.ActivityType{Name: workflows.ActivityRunCDC}}}
	if !sliceRunning(copying) || sliceRunning(cdcOnly) || sliceRunning(nil) {
		t.Fatal("sliceRunning does not tell a running copy slice")
	}
	end := time.Now().Add(time.Minute)
	spec := workflows.MoveSpec{ID: "m1", EstRows: 150_000}
	m := workflows.MoveState{Spec: spec, Phase: workflows.PhaseSnapshotCopy} // the migration has heard of no slice yet
	newerCopy(&m, workflows.MoveState{Spec: spec, RowsCopied: 148_000, BytesCopied: 9_000, CopyDone: true, CopyEnd: end})
	if m.RowsCopied != 148_000 || m.BytesCopied != 9_000 || !m.CopyDone || !m.CopyEnd.Equal(end) || m.Phase != workflows.PhaseSnapshotCopy {
		t.Errorf("after the move's state: %+v", m)
	}
	newerCopy(&m, workflows.MoveState{Spec: spec, RowsCopied: 1_000}) // older than what is shown
	if m.RowsCopied != 148_000 {
		t.Errorf("an older count replaced a newer one: %d rows", m.RowsCopied)
	}
	newerCopy(&m, workflows.MoveState{Spec: workflows.MoveSpec{ID: "m2"}, RowsCopied: 200_000})
	if m.RowsCopied != 148_000 {
		t.Errorf("another move's count was taken: %d rows", m.RowsCopied)
	}
}

// status sets each phase against its prediction.
func TestStatusSetsPhasesAgainstTheirPrediction(t *testing.T) {
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	m := workflows.MoveState{Spec: workflows.MoveSpec{Source: "shard1", Target: "shard5",
		Predicted: &workflows.Predicted{Copy: 220 * time.Second, CatchUp: 2 * time.Second, Verify: 10 * time.Second, SlotWALBytes: 120 << 20}},
		Timings: []workflows.PhaseTiming{{Phase: workflows.PhaseSnapshotCopy, Start: start, End: start.Add(192 * time.Second)},
			{Phase: workflows.PhaseCDCCatchUp, Start: start.Add(192 * time.Second)}}}
	got := PredictedText(m, start.Add(196*time.Second))
	if want := "copy 3m12s of predicted 3m40s, catch-up 4s of predicted 2s, verify predicted 10s; slot WAL predicted 120.0 MiB"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	// A running copy, past a tenth of its estimate, is predicted again
	// from its own rate: 30,000 of 100,000 rows in the 60 s to its last
	// report, 200 s in all.
	c := m
	c.Spec.EstRows, c.RowsCopied, c.Phase = 100_000, 30_000, workflows.PhaseSnapshotCopy
	c.Timings = []workflows.PhaseTiming{{Phase: workflows.PhaseSnapshotCopy, Start: start}}
	c.UpdatedAt = start.Add(60 * time.Second)
	if got, want := PredictedText(c, start.Add(65*time.Second)), "copy 1m5s of predicted 3m40s (3m20s at its own rate), catch-up predicted 2s"; !strings.HasPrefix(got, want) {
		t.Errorf("a running copy:\ngot  %q\nwant %q…", got, want)
	}
	c.RowsCopied = 9_000 // under a tenth: the probe's prediction only
	if got, want := PredictedText(c, start.Add(65*time.Second)), "copy 1m5s of predicted 3m40s, catch-up"; !strings.HasPrefix(got, want) {
		t.Errorf("a copy under a tenth:\ngot  %q\nwant %q…", got, want)
	}
	m.Spec.Predicted = nil
	if got := PredictedText(m, start); got != "" {
		t.Fatalf("a move without a prediction: %q", got)
	}
}
