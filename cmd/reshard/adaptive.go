package main

import (
	"github.com/spf13/pflag"

	"github.com/reshard/reshard/workflows"
)

// adaptiveFlagNames are the adaptive throttle's flags (throttle: any of
// them given replaces the adaptive limits as a whole).
var adaptiveFlagNames = []string{"max-source-latency-increase", "max-probe-latency", "max-replica-lag", "max-slot-wal", "max-active-backends", "probe-query"}

// registerAdaptive binds the adaptive throttle's limits to a, for the
// migration verbs and reshard throttle alike.
func registerAdaptive(fl *pflag.FlagSet, a *workflows.AdaptiveThrottle) {
	fl.Float64Var(&a.MaxLatencyIncrease, "max-source-latency-increase", 0,
		"adaptive throttle: percent the probe query's latency may rise over its baseline, measured before the copy (on the source, and on the target against its own) (0: not watched)")
	fl.DurationVar(&a.MaxProbeLatency, "max-probe-latency", 0, "adaptive throttle: ceiling on the probe query's latency (0: not watched)")
	fl.DurationVar(&a.MaxReplicaLag, "max-replica-lag", 0, "adaptive throttle: ceiling on the replay lag of the shards' physical replicas (0: not watched)")
	fl.Int64Var(&a.MaxSlotWAL, "max-slot-wal", 0, "adaptive throttle: ceiling on the WAL bytes the move's slot retains on the source (0: not watched)")
	fl.IntVar(&a.MaxActiveBackends, "max-active-backends", 0, "adaptive throttle: ceiling on the source's client backends running a statement, reshard's own not counted (0: not watched)")
	fl.StringVar(&a.ProbeQuery, "probe-query", "", "adaptive throttle: the probe query (default SELECT 1; one like the application's tracks its latency best)")
}

// adaptiveChanged reports whether any adaptive flag was given.
func adaptiveChanged(fl *pflag.FlagSet) bool {
	for _, n := range adaptiveFlagNames {
		if fl.Changed(n) {
			return true
		}
	}
	return false
}
