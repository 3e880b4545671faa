package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"

	"github.com/reshard/reshard/workflows"
)

// What reshard throttle sends: the adaptive flags replace the adaptive limits
// as a whole and, alone, keep the rates; the rate flags alone keep the
// adaptive limits (Adaptive nil); all adaptive limits 0 turn it off.
func TestThrottleUpdate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want workflows.Throttle
		err  string
	}{
		{[]string{"--rows-per-sec", "500"}, workflows.Throttle{RowsPerSec: 500}, ""},
		{[]string{"--max-source-latency-increase", "10", "--max-replica-lag", "2s"},
			workflows.Throttle{KeepRates: true, Adaptive: &workflows.AdaptiveThrottle{MaxLatencyIncrease: 10, MaxReplicaLag: 2 * time.Second}}, ""},
		{[]string{"--rows-per-sec", "500", "--max-slot-wal", "1073741824", "--max-active-backends", "20"},
			workflows.Throttle{RowsPerSec: 500, Adaptive: &workflows.AdaptiveThrottle{MaxSlotWAL: 1 << 30, MaxActiveBackends: 20}}, ""},
		{[]string{"--max-source-latency-increase", "0"}, workflows.Throttle{KeepRates: true, Adaptive: &workflows.AdaptiveThrottle{}}, ""},
		{[]string{"--max-probe-latency", "2ms", "--probe-query", "SELECT v FROM kv WHERE k = 1"},
			workflows.Throttle{KeepRates: true, Adaptive: &workflows.AdaptiveThrottle{MaxProbeLatency: 2 * time.Millisecond, ProbeQuery: "SELECT v FROM kv WHERE k = 1"}}, ""},
		{[]string{}, workflows.Throttle{}, "give --rows-per-sec"},
		{[]string{"--max-source-latency-increase", "-3"}, workflows.Throttle{}, "--max-source-latency-increase -3"},
	} {
		var (
			rows, bytes float64
			chunk       int
			ad          adaptiveFlags
		)
		fl := pflag.NewFlagSet("throttle", pflag.ContinueOnError)
		fl.Float64Var(&rows, "rows-per-sec", 0, "")
		fl.Float64Var(&bytes, "bytes-per-sec", 0, "")
		fl.IntVar(&chunk, "copy-chunk-rows", 0, "")
		ad.register(fl)
		if err := fl.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := throttleUpdate(fl, rows, bytes, chunk, &ad)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: %+v (adaptive %+v), %v; want %+v (adaptive %+v)", tc.args, got, got.Adaptive, err, tc.want, tc.want.Adaptive)
		}
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
	if v := viewMove(m, workflows.Throttle{}, time.Now()); v.Phase != "SNAPSHOT_COPY (throttled: replica lag 3.2s > 2s, 3200 rows/s)" {
		t.Errorf("status phase %q", v.Phase)
	}
}
