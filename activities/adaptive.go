package activities

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/activity"

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
		Reader:     &backfill.PGSignals{Source: source, Target: target, Slot: slot, ProbeSQL: limits.ProbeQuery},
		Controller: backfill.Controller{Max: fixed, Limits: adaptiveLimits(limits)},
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

// adaptiveLimits are the operator's limits as the Controller takes them.
func adaptiveLimits(l *workflows.AdaptiveThrottle) backfill.AdaptiveLimits {
	if l == nil {
		return backfill.AdaptiveLimits{}
	}
	return backfill.AdaptiveLimits{MaxLatencyIncrease: l.MaxLatencyIncrease, MaxProbeLatency: l.MaxProbeLatency,
		MaxActiveBackends: l.MaxActiveBackends, MaxReplicaLag: l.MaxReplicaLag, MaxSlotWAL: l.MaxSlotWAL}
}

// ThrottleFollowInterval is how often a running verify, CLEANUP or
// rollback asks its move for the throttle in force.
var ThrottleFollowInterval = 2 * time.Second

// follow keeps a running work's throttle at the one its move's workflow has
// in force (asked through LiveThrottle every ThrottleFollowInterval), from
// started, the throttle the work started with, until the returned stop is
// called: the rows/s of th when rows is true (verify's; CLEANUP and a
// rollback have none), and the limits of ad. An adaptive throttle that was
// off when the work started stays off until its next start (its baselines
// were not measured). Without LiveThrottle, or outside an activity, it
// does nothing.
func (a *Activities) follow(ctx context.Context, started workflows.Throttle, th *backfill.Throttle, rows bool, ad *backfill.Adaptive) (stop func()) {
	if a.LiveThrottle == nil || !activity.IsActivity(ctx) {
		return func() {}
	}
	id := activity.GetInfo(ctx).WorkflowExecution.ID
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(ThrottleFollowInterval)
		defer t.Stop()
		last := started
		for {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
			}
			now, err := a.LiveThrottle(fctx, id)
			if err != nil {
				continue // the limits in force stay
			}
			rowsChanged := rows && now.RowsPerSec != last.RowsPerSec
			changed := rowsChanged
			if rowsChanged {
				th.SetLimits(now.RowsPerSec, 0)
			}
			if ad != nil && (rowsChanged || !sameAdaptive(now.Adaptive, last.Adaptive)) {
				var ceiling float64
				if rows {
					ceiling = now.RowsPerSec
				}
				ad.Retune(adaptiveLimits(now.Adaptive), ceiling)
				changed = true
			}
			if changed {
				a.log.Info("throttle changed while the work runs", "workflow", id, "rows_per_sec", now.RowsPerSec,
					"adaptive", now.Adaptive.Enabled())
			}
			last = now
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func sameAdaptive(a, b *workflows.AdaptiveThrottle) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
