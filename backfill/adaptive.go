package backfill

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Signals are what the adaptive throttle steers by: readings of the source
// and target while the work runs (PGSignals reads them).
type Signals struct {
	// SourceProbe and TargetProbe are the latency of the probe query on
	// each side (the median of a few probes; 0: not read).
	SourceProbe, TargetProbe time.Duration
	// ActiveBackends counts the source's client backends running a
	// statement, reshard's own sessions not included.
	ActiveBackends int
	// Replicas is the number of physical replicas of either side (streaming
	// from pg_stat_replication), ReplicaLag the largest replay lag among
	// them (0 without replicas).
	Replicas   int
	ReplicaLag time.Duration
	// SlotWAL is the WAL the move's slot retains on the source, in bytes
	// (-1: no slot).
	SlotWAL int64
}

// AdaptiveLimits are the operator's targets; a zero limit is not watched.
type AdaptiveLimits struct {
	// MaxLatencyIncrease is the percentage the probe latency of either side
	// may rise over its baseline (measured before the work starts).
	MaxLatencyIncrease float64
	// MaxProbeLatency is a ceiling on the probe latency of either side.
	MaxProbeLatency   time.Duration
	MaxActiveBackends int
	MaxReplicaLag     time.Duration
	MaxSlotWAL        int64
}

// Enabled reports whether any limit is set.
func (l AdaptiveLimits) Enabled() bool {
	return l.MaxLatencyIncrease > 0 || l.MaxProbeLatency > 0 || l.MaxActiveBackends > 0 || l.MaxReplicaLag > 0 || l.MaxSlotWAL > 0
}

// The control law's constants. A signal at or above holdAt of its limit
// holds the rate (no increase): increases stop before the limit is reached,
// so the rate settles below it instead of crossing it every few steps.
const (
	// A cut is proportional to how far over its limit the worst signal is
	// (the rate divided by the ratio), between these: a reading just over
	// the limit trims the rate, one twice over halves it.
	deepestCut, gentlestCut = 0.5, 0.9
	holdAt                  = 0.8
	// After a cut the rate climbs back quickly to nearKnee of the rate it
	// was cut from (halfway there each step), creeps by kneeStep (a fraction
	// of the rate) from there to beyondKnee of it — the readings lag the
	// rate by a few steps, and a fast climb past the rate that was too much
	// would overshoot it again by as many steps — and above that (the
	// shards bear more now) grows by probeStep, the rate doubling in about
	// 7 steps from any rate, the floor included.
	nearKnee, beyondKnee = 0.9, 1.1
	kneeStep, probeStep  = 0.02, 0.1
	// settleSteps is how many steps after a cut the readings are taken to
	// still show the rate before it (the smoothing's lag): over the limit
	// they hold rather than cut again, so one excess is not cut twice.
	settleSteps = 2
	// DefaultStartRate is the rate of the first step (rows/s): low, since
	// nothing is known yet; slow start doubles it every step until a
	// signal first comes near its limit.
	DefaultStartRate = 1000.0
	// DefaultMinRate is the floor: a throttled copy always moves (a move
	// never fails for being throttled, it gets slow).
	DefaultMinRate = 50.0
)

// Signal names, the bounded label of the limiting-signal metric.
const (
	SignalNone          = "none"
	SignalSourceLatency = "source_probe_latency"
	SignalTargetLatency = "target_probe_latency"
	SignalActive        = "active_backends"
	SignalReplicaLag    = "replica_lag"
	SignalSlotWAL       = "slot_wal"
	SignalUnreadable    = "unreadable"
)

// Controller is the adaptive throttle's control law, pure (no clock, no
// I/O): each Step takes one reading and returns the next rows/s. Over a
// limit the rate is cut in proportion to the excess (deepestCut to
// gentlestCut), once: the next settleSteps readings still show the rate
// before the cut; near a limit (holdAt) it holds; below every limit it
// doubles during slow start (until a signal first comes near its limit),
// then climbs back fast to just below the rate it was last cut from, creeps
// past that rate, and grows by probeStep well beyond it.
//
// A probe reading within the baseline's own spread (the noise measured with
// the work held) is not congestion: on a busy machine a sub-millisecond probe
// moves by more than a 10 % target with no work at all, and a law that takes
// that for load sits at its floor. The price: the law sees no rise smaller
// than the probe's own noise.
//
// The rate never exceeds twice the rate the work achieved in the last
// interval (a rate nobody uses would take many cuts to come down when load
// arrives), nor Max when Max is set (the operator's fixed rows/s).
type Controller struct {
	Limits AdaptiveLimits
	// Baseline probe latencies (0: not measured; the increase limit then
	// does not apply to that side).
	SourceBaseline, TargetBaseline time.Duration
	// SourceNoise and TargetNoise are the baselines' own spread: how far
	// above its baseline a reading went while the baseline was measured (0:
	// none known). MaxLatencyIncrease counts from the top of it: the
	// increase allowed is the spread's (in percent of the baseline) plus
	// MaxLatencyIncrease. Counted from the median alone, a baseline measured
	// a little low (9 readings of a noisy probe) puts the shard's own idle
	// latency near the limit.
	SourceNoise, TargetNoise time.Duration
	Min, Max                 float64 // rows/s; Min defaults to DefaultMinRate
	// Smoothing is the weight of a new probe reading in the latency the law
	// compares with its limits, an exponentially weighted mean (default
	// DefaultSmoothing; 1: none). A sub-millisecond probe on a busy machine
	// jumps by more than a 10 % target from one reading to the next: unsmoothed,
	// noise alone holds the rate at the floor. A mean, not a median: the
	// copy harms an application's tail by more slow moments, and a median
	// of readings, deaf to those, let the bench's copy run unthrottled.
	Smoothing float64

	rate     float64
	knee     float64 // the rate of the last cut (0: none yet)
	settle   int     // steps left in which the readings still show the rate before the last cut
	congests bool    // slow start is over
	smoothed [2]time.Duration
}

// DefaultSmoothing is the default weight of a new probe reading: a
// sustained rise shows in full within about 5 readings, a lone spike by a
// third of its height.
const DefaultSmoothing = 0.3

// smooth returns the smoothed probe latencies of s.
func (c *Controller) smooth(s Signals) Signals {
	a := c.Smoothing
	if a <= 0 || a > 1 {
		a = DefaultSmoothing
	}
	for i, p := range []*time.Duration{&s.SourceProbe, &s.TargetProbe} {
		switch {
		case *p <= 0:
		case c.smoothed[i] <= 0:
			c.smoothed[i] = *p // the first reading seeds the mean
		default:
			c.smoothed[i] = time.Duration(a*float64(*p) + (1-a)*float64(c.smoothed[i]))
		}
		if *p > 0 {
			*p = c.smoothed[i]
		}
	}
	return s
}

// Decision is one step's outcome.
type Decision struct {
	RowsPerSec float64
	// Signal is the name of the signal that holds the work back (one of
	// Signal*), SignalNone when none does; Reason says it in words: "source
	// probe latency +14% > +10%".
	Signal, Reason string
	// Cut: the rate went down this step; Held: it stayed.
	Cut, Held bool
}

// Rate is the current rate (0 before the first step).
func (c *Controller) Rate() float64 { return c.rate }

// SetRate resumes at rate (a rate carried over from an earlier run), past
// slow start.
func (c *Controller) SetRate(rate float64) {
	if rate > 0 {
		c.rate, c.congests, c.knee, c.settle = rate, true, 0, 0
	}
}

// reading is one signal against its limit: ratio is value/limit.
type reading struct {
	signal, reason string
	ratio          float64
}

// readings compares every watched signal with its limit.
func (c *Controller) readings(s Signals) []reading {
	l := c.Limits
	var out []reading
	pct := func(v, base time.Duration) float64 { return 100 * (float64(v)/float64(base) - 1) }
	for _, side := range []struct {
		name, signal   string
		v, base, noise time.Duration
	}{{"source", SignalSourceLatency, s.SourceProbe, c.SourceBaseline, c.SourceNoise},
		{"target", SignalTargetLatency, s.TargetProbe, c.TargetBaseline, c.TargetNoise}} {
		if side.v <= 0 {
			continue
		}
		if l.MaxLatencyIncrease > 0 && side.base > 0 {
			p := pct(side.v, side.base)
			// The target counts from the top of the baseline's own spread:
			// a reading within it is the shard as it was without the work.
			allowed, limit := l.MaxLatencyIncrease, fmt.Sprintf("+%.0f%%", l.MaxLatencyIncrease)
			if spread := pct(side.base+side.noise, side.base); spread >= 0.5 {
				allowed += spread
				limit = fmt.Sprintf("+%.0f%% (+%.0f%% over the baseline's own spread, +%.0f%%)", allowed, l.MaxLatencyIncrease, spread)
			}
			out = append(out, reading{side.signal, fmt.Sprintf("%s probe latency %+.0f%% (%s over %s) vs %s", side.name, p,
				roundDur(side.v), roundDur(side.base), limit), p / allowed})
		}
		if l.MaxProbeLatency > 0 {
			out = append(out, reading{side.signal, fmt.Sprintf("%s probe latency %s vs %s", side.name, roundDur(side.v), roundDur(l.MaxProbeLatency)),
				float64(side.v) / float64(l.MaxProbeLatency)})
		}
	}
	if l.MaxActiveBackends > 0 {
		out = append(out, reading{SignalActive, fmt.Sprintf("active backends %d vs %d", s.ActiveBackends, l.MaxActiveBackends),
			float64(s.ActiveBackends) / float64(l.MaxActiveBackends)})
	}
	if l.MaxReplicaLag > 0 && s.Replicas > 0 {
		out = append(out, reading{SignalReplicaLag, fmt.Sprintf("replica lag %s vs %s", roundDur(s.ReplicaLag), roundDur(l.MaxReplicaLag)),
			float64(s.ReplicaLag) / float64(l.MaxReplicaLag)})
	}
	if l.MaxSlotWAL > 0 && s.SlotWAL >= 0 {
		out = append(out, reading{SignalSlotWAL, fmt.Sprintf("slot WAL %s vs %s", humanBytes(s.SlotWAL), humanBytes(l.MaxSlotWAL)),
			float64(s.SlotWAL) / float64(l.MaxSlotWAL)})
	}
	return out
}

// Step takes one reading of the signals and the rate the work achieved
// since the last step (rows/s; 0 when unknown or idle) and returns the next
// rate and what limits it.
func (c *Controller) Step(s Signals, achieved float64) Decision {
	minRate := c.Min
	if minRate <= 0 {
		minRate = DefaultMinRate
	}
	if c.rate <= 0 {
		c.rate = DefaultStartRate
	}
	worst := reading{signal: SignalNone}
	for _, r := range c.readings(c.smooth(s)) {
		if r.ratio > worst.ratio {
			worst = r
		}
	}
	d := Decision{Signal: SignalNone}
	settling := c.settle > 0
	c.settle = max(c.settle-1, 0)
	switch {
	case worst.ratio > 1 && !settling:
		c.knee = c.rate
		c.rate *= min(gentlestCut, max(deepestCut, 1/worst.ratio))
		c.congests, c.settle = true, settleSteps
		d.Cut, d.Signal, d.Reason = true, worst.signal, strings.Replace(worst.reason, " vs ", " > ", 1)
	case worst.ratio > 1:
		d.Held, d.Signal, d.Reason = true, worst.signal, "holding after a cut: "+strings.Replace(worst.reason, " vs ", " > ", 1)
	case worst.ratio >= holdAt:
		c.congests = true
		d.Held, d.Signal, d.Reason = true, worst.signal, "holding: "+strings.Replace(worst.reason, " vs ", " near ", 1)
	case !c.congests:
		c.rate *= 2
	case c.rate < nearKnee*c.knee:
		c.rate = min(c.rate+max((nearKnee*c.knee-c.rate)/2, kneeStep*c.rate, minRate), nearKnee*c.knee)
	case c.rate < beyondKnee*c.knee:
		c.rate += max(kneeStep*c.rate, minRate)
	default:
		c.rate += max(probeStep*c.rate, minRate)
	}
	if achieved > 0 && !d.Cut {
		if cap := 2 * max(achieved, minRate); c.rate > cap {
			c.rate = cap
		}
	}
	if c.Max > 0 && c.rate > c.Max {
		c.rate = c.Max
	}
	c.rate = max(c.rate, minRate)
	d.RowsPerSec = c.rate
	return d
}

// unreadable is the decision when the signals could not be read: hold the
// rate, say why. A throttle that cannot see does not fail the work.
func (c *Controller) unreadable(err error) Decision {
	if c.rate <= 0 {
		c.rate = max(c.Min, DefaultMinRate)
	}
	return Decision{RowsPerSec: c.rate, Signal: SignalUnreadable, Reason: "holding: signals unreadable: " + err.Error(), Held: true}
}

func roundDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	exp := int(math.Log(float64(n)) / math.Log(unit))
	exp = min(exp, 4)
	return fmt.Sprintf("%.1f %ciB", float64(n)/math.Pow(unit, float64(exp)), "KMGT"[exp-1])
}
