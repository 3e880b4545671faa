package main

import (
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/reshard/reshard/workflows"
)

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
	if v := viewMove(m, workflows.Throttle{}, time.Now()); !strings.Contains(v.Phase, "target shard5 failed over at 2026-12-03T10:00:55Z (timeline 1 → 2)") {
		t.Errorf("status shows %q", v.Phase)
	}
}
