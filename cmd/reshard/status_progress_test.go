package main

import (
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/reshard/reshard/workflows"
)

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
	printMigrationStatus(&b, "x", "", st, now)
	for _, want := range []string{"[==========          ]  50%", "6000/12000 rows compared", "1m20s", "running: 3/6 chunks"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	last := map[string]string{}
	var lines strings.Builder
	printChanges(&lines, st, last, now)
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
	if v := viewMove(st.Moves[0], workflows.Throttle{}, now); v.Verify != "running" {
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
	m := workflows.MoveState{Phase: workflows.PhaseGrace, LagBytes: 329_728}
	if liveLag(&m, pending); m.LagBytes != 329_728 {
		t.Errorf("GRACE took the forward stream's lag")
	}
	st := workflows.MigrationState{Phase: workflows.PhaseGrace, FromVersion: 1, Version: 6, MovedFraction: 0.2}
	var b strings.Builder
	printMigrationStatus(&b, "x", "", st, now)
	if !strings.HasPrefix(b.String(), "migration x  GRACE  topology v1 → v6  moving 20.00% of the token space\n") {
		t.Errorf("GRACE header:\n%s", b.String())
	}
	st.Phase, st.Version = workflows.PhaseRolledBack, 8
	b.Reset()
	printMigrationStatus(&b, "x", "", st, now)
	if !strings.HasPrefix(b.String(), "migration x  ROLLED_BACK  rolled back: nothing moved (topology v8 has the ring of v1)\n") {
		t.Errorf("rolled back header:\n%s", b.String())
	}
}
