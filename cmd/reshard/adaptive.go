package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/reshard/reshard/workflows"
)

// adaptiveFlags are the adaptive throttle's limits, for the migration verbs
// and reshard throttle alike.
type adaptiveFlags struct {
	latencyIncrease float64
	probeLatency    time.Duration
	replicaLag      time.Duration
	slotWAL         int64
	active          int
	probe           string
}

// adaptiveFlagNames are the flags' names (throttle: any of them given
// replaces the adaptive limits as a whole).
var adaptiveFlagNames = []string{"max-source-latency-increase", "max-probe-latency", "max-replica-lag", "max-slot-wal", "max-active-backends", "probe-query"}

func (f *adaptiveFlags) register(fl *pflag.FlagSet) {
	fl.Float64Var(&f.latencyIncrease, "max-source-latency-increase", 0,
		"adaptive throttle: percent the probe query's latency may rise over its baseline, measured before the copy (on the source, and on the target against its own) (0: not watched)")
	fl.DurationVar(&f.probeLatency, "max-probe-latency", 0, "adaptive throttle: ceiling on the probe query's latency (0: not watched)")
	fl.DurationVar(&f.replicaLag, "max-replica-lag", 0, "adaptive throttle: ceiling on the replay lag of the shards' physical replicas (0: not watched)")
	fl.Int64Var(&f.slotWAL, "max-slot-wal", 0, "adaptive throttle: ceiling on the WAL bytes the move's slot retains on the source (0: not watched)")
	fl.IntVar(&f.active, "max-active-backends", 0, "adaptive throttle: ceiling on the source's client backends running a statement, reshard's own not counted (0: not watched)")
	fl.StringVar(&f.probe, "probe-query", "", "adaptive throttle: the probe query (default SELECT 1; one like the application's tracks its latency best)")
}

// value is the adaptive limits given (nil: none set).
func (f *adaptiveFlags) value() *workflows.AdaptiveThrottle {
	a := &workflows.AdaptiveThrottle{MaxLatencyIncrease: f.latencyIncrease, MaxProbeLatency: f.probeLatency, MaxReplicaLag: f.replicaLag,
		MaxSlotWAL: f.slotWAL, MaxActiveBackends: f.active, ProbeQuery: f.probe}
	if *a == (workflows.AdaptiveThrottle{}) {
		return nil
	}
	return a
}

// changed reports whether any adaptive flag was given.
func (f *adaptiveFlags) changed(fl *pflag.FlagSet) bool {
	for _, n := range adaptiveFlagNames {
		if fl.Changed(n) {
			return true
		}
	}
	return false
}
