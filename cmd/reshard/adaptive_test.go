package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/reshard/reshard/request"
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
		var th request.Throttle
		fl := pflag.NewFlagSet("throttle", pflag.ContinueOnError)
		fl.Float64Var(&th.RowsPerSec, "rows-per-sec", 0, "")
		fl.Float64Var(&th.BytesPerSec, "bytes-per-sec", 0, "")
		fl.IntVar(&th.ChunkRows, "copy-chunk-rows", 0, "")
		registerAdaptive(fl, &th.Adaptive)
		if err := fl.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := throttleUpdate(fl, th)
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
