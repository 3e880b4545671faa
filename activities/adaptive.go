package activities

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/workflows"
)

// adaptive is the adaptive throttle of one activity's work over th: the
// limits the operator set, the probe baselines of an earlier run (the
// copy's; nil: measured now, before the work starts) and, for a copy, its
// rate. Nil when no limit is set: the work runs on th alone.
func (a *Activities) adaptive(move string, limits *workflows.AdaptiveThrottle, from *workflows.AdaptiveStatus, keepRate bool,
	th *backfill.Throttle, source, target *pgxpool.Pool, slot string) *backfill.Adaptive {
	if !limits.Enabled() {
		return nil
	}
	fixed, _ := th.Limits()
	ad := &backfill.Adaptive{
		Throttle: th, Move: move, Logger: a.log.With("move", move), Metrics: a.metrics.Backfill,
		Reader: &backfill.PGSignals{Source: source, Target: target, Slot: slot, ProbeSQL: limits.ProbeQuery},
		Controller: backfill.Controller{Max: fixed, Limits: backfill.AdaptiveLimits{
			MaxLatencyIncrease: limits.MaxLatencyIncrease, MaxProbeLatency: limits.MaxProbeLatency,
			MaxActiveBackends: limits.MaxActiveBackends, MaxReplicaLag: limits.MaxReplicaLag, MaxSlotWAL: limits.MaxSlotWAL,
		}},
	}
	ad.Rebaseline = Rebaseline
	if from != nil {
		ad.Controller.SourceBaseline, ad.Controller.TargetBaseline, ad.MeasuredAt = from.SourceBaseline, from.TargetBaseline, from.BaselineAt
		ad.Controller.SourceNoise, ad.Controller.TargetNoise = from.SourceNoise, from.TargetNoise
		if target == nil {
			ad.Controller.TargetBaseline, ad.Controller.TargetNoise = 0, 0
		}
		if keepRate {
			ad.Controller.SetRate(from.RowsPerSec)
		}
	}
	return ad
}

// adaptiveStatus is what an adaptive throttle did last, for heartbeats,
// the workflow and status (nil without one).
func adaptiveStatus(ad *backfill.Adaptive) *workflows.AdaptiveStatus {
	if ad == nil {
		return nil
	}
	s := ad.State()
	return &workflows.AdaptiveStatus{RowsPerSec: s.RowsPerSec, Signal: s.Signal, Reason: s.Reason,
		SourceBaseline: s.SourceBaseline, TargetBaseline: s.TargetBaseline, SourceNoise: s.SourceNoise, TargetNoise: s.TargetNoise,
		BaselineAt: s.BaselineAt}
}

// Rebaseline is how often the adaptive throttle measures its probe
// baselines again, the work held for about 1.5 s meanwhile (0.5 % of the
// time): the shards' own load drifts over a long copy.
const Rebaseline = 5 * time.Minute
