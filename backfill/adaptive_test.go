package backfill

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// Each case steps a controller through readings and checks the rate and the
// limiting signal after every step.
func TestControllerLaw(t *testing.T) {
	lat := AdaptiveLimits{MaxLatencyIncrease: 10}
	type step struct {
		s        Signals
		achieved float64
		rate     float64
		signal   string
		reason   string // a substring of the reason
	}
	calm := Signals{SourceProbe: 10 * ms, TargetProbe: 10 * ms, SlotWAL: -1}
	slow := func(p time.Duration) Signals { s := calm; s.SourceProbe = p; return s }
	cases := []struct {
		name  string
		c     Controller
		steps []step
	}{
		{"slow start doubles below every limit", Controller{Limits: lat, SourceBaseline: 10 * ms, TargetBaseline: 10 * ms}, []step{
			{calm, 0, 2000, SignalNone, ""},
			{calm, 0, 4000, SignalNone, ""},
			{calm, 0, 8000, SignalNone, ""},
		}},
		{"over the limit cuts in proportion, once, names the signal, climbs back toward the rate of the cut", Controller{Limits: lat, SourceBaseline: 10 * ms, TargetBaseline: 10 * ms}, []step{
			{calm, 0, 2000, SignalNone, ""},
			// +25% against +10%: 2.5 times over, halved (the deepest cut).
			{slow(12500 * time.Microsecond), 0, 1000, SignalSourceLatency, "source probe latency +25% (12.5ms over 10ms) > +10%"},
			// The next reading still shows the rate before the cut.
			{slow(12500 * time.Microsecond), 0, 1000, SignalSourceLatency, "holding after a cut: source probe latency +25%"},
			// Halfway back to 0.9 × 2000 (the rate cut from).
			{calm, 0, 1400, SignalNone, ""},
			// 1.25 times over: cut to 1/1.25 of the rate.
			{slow(11250 * time.Microsecond), 0, 1120, SignalSourceLatency, "> +10%"},
			// Halfway back to 0.9 × 1400 (at least the floor's 50), then
			// creeping past it.
			{calm, 0, 1190, SignalNone, ""},
			{calm, 0, 1240, SignalNone, ""},
			{calm, 0, 1260, SignalNone, ""},
			{calm, 0, 1310, SignalNone, ""},
		}},
		{"just over the limit trims by a tenth", Controller{Limits: lat, SourceBaseline: 10 * ms}, []step{
			{calm, 0, 2000, SignalNone, ""},
			{slow(11100 * time.Microsecond), 0, 1800, SignalSourceLatency, "+11% (11.1ms over 10ms) > +10%"},
		}},
		{"near the limit holds and ends slow start", Controller{Limits: lat, SourceBaseline: 10 * ms, TargetBaseline: 10 * ms}, []step{
			{calm, 0, 2000, SignalNone, ""},
			{slow(10900 * time.Microsecond), 0, 2000, SignalSourceLatency, "holding: source probe latency +9%"},
			{calm, 0, 2200, SignalNone, ""}, // a tenth more: no cut yet to climb back to
		}},
		{"a reading within the baseline's own spread is not congestion", Controller{Limits: lat, SourceBaseline: 10 * ms, SourceNoise: 3 * ms}, []step{
			{slow(12 * ms), 0, 2000, SignalNone, ""}, // +20%: over the target, inside the spread (+30%)
			{slow(18 * ms), 0, 1000, SignalSourceLatency, "source probe latency +80% (18ms over 10ms) > +40% (+10% over the baseline's own spread, +30%)"},
		}},
		{"the target counts from the top of the spread", Controller{Limits: lat, SourceBaseline: 10 * ms, SourceNoise: ms / 2}, []step{
			{slow(12500 * time.Microsecond), 0, 600, SignalSourceLatency, "source probe latency +25% (12.5ms over 10ms) > +15% (+10% over the baseline's own spread, +5%)"},
		}},
		{"the target's probe counts against its own baseline", Controller{Limits: lat, SourceBaseline: 10 * ms, TargetBaseline: 20 * ms}, []step{
			{Signals{SourceProbe: 10 * ms, TargetProbe: 30 * ms, SlotWAL: -1}, 0, 500, SignalTargetLatency, "target probe latency +50%"},
		}},
		{"the worst signal is named", Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10, MaxReplicaLag: 2 * time.Second}, SourceBaseline: 10 * ms}, []step{
			{Signals{SourceProbe: 11400 * time.Microsecond, Replicas: 1, ReplicaLag: 3200 * ms, SlotWAL: -1}, 0, 625, SignalReplicaLag, "replica lag 3.2s > 2s"},
		}},
		{"replica lag is not watched without replicas, nor the slot without one", Controller{Limits: AdaptiveLimits{MaxReplicaLag: time.Second, MaxSlotWAL: 1 << 20}}, []step{
			{Signals{ReplicaLag: time.Hour, SlotWAL: -1}, 0, 2000, SignalNone, ""},
		}},
		{"slot WAL and active backends", Controller{Limits: AdaptiveLimits{MaxSlotWAL: 1 << 30, MaxActiveBackends: 10}}, []step{
			{Signals{SlotWAL: 2 << 30, ActiveBackends: 3}, 0, 500, SignalSlotWAL, "slot WAL 2.0 GiB > 1.0 GiB"},
			{Signals{SlotWAL: 0, ActiveBackends: 20}, 0, 500, SignalActive, "holding after a cut: active backends 20 > 10"},
		}},
		{"a probe ceiling", Controller{Limits: AdaptiveLimits{MaxProbeLatency: 5 * ms}}, []step{
			{Signals{SourceProbe: 10 * ms, SlotWAL: -1}, 0, 500, SignalSourceLatency, "source probe latency 10ms > 5ms"},
		}},
		{"never above twice the achieved rate", Controller{Limits: lat, SourceBaseline: 10 * ms}, []step{
			{calm, 0, 2000, SignalNone, ""},
			{calm, 300, 600, SignalNone, ""},
			{calm, 0, 1200, SignalNone, ""}, // idle (paused): no cap
		}},
		{"never above the operator's rows/s", Controller{Limits: lat, SourceBaseline: 10 * ms, Max: 3000}, []step{
			{calm, 0, 2000, SignalNone, ""},
			{calm, 0, 3000, SignalNone, ""},
			{calm, 0, 3000, SignalNone, ""},
		}},
		{"never below the floor", Controller{Limits: lat, SourceBaseline: 10 * ms, Min: 300}, []step{
			{slow(20 * ms), 0, 500, SignalSourceLatency, ""},
			{slow(20 * ms), 0, 500, SignalSourceLatency, "holding after a cut"},
			{slow(20 * ms), 0, 500, SignalSourceLatency, "holding after a cut"},
			{slow(20 * ms), 0, 300, SignalSourceLatency, ""},
			{slow(20 * ms), 0, 300, SignalSourceLatency, ""},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.Smoothing = 1 // the law itself; smoothing has its own test
			for i, st := range tc.steps {
				d := c.Step(st.s, st.achieved)
				if math.Abs(d.RowsPerSec-st.rate) > 0.01 || d.Signal != st.signal || !strings.Contains(d.Reason, st.reason) {
					t.Fatalf("step %d: %.0f rows/s, %s %q; want %.0f rows/s, %s %q", i, d.RowsPerSec, d.Signal, d.Reason, st.rate, st.signal, st.reason)
				}
				if st.signal == SignalNone && d.Reason != "" {
					t.Fatalf("step %d: not limited but reason %q", i, d.Reason)
				}
			}
		})
	}
}

func TestControllerUnreadableHolds(t *testing.T) {
	c := Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}, SourceBaseline: ms}
	c.SetRate(4000)
	d := c.unreadable(errors.New("connection refused"))
	if d.RowsPerSec != 4000 || d.Signal != SignalUnreadable || !strings.Contains(d.Reason, "connection refused") {
		t.Fatalf("%+v", d)
	}
}

// A simulated source whose probe latency rises with the copy rate (linear
// load, +10% at 20,000 rows/s): the controller finds the rate, stays near it
// and keeps the latency within the target on most steps — AIMD crosses the
// limit now and then, by design, and comes back at once.
func TestControllerSettlesBelowTheLimit(t *testing.T) {
	const base = 400 * time.Microsecond
	c := Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}, SourceBaseline: base}
	latency := func(rate float64) time.Duration {
		return base + time.Duration(float64(base)*0.10*rate/20000)
	}
	rate := DefaultStartRate
	over, steps := 0, 200
	var sum float64
	for i := range steps {
		d := c.Step(Signals{SourceProbe: latency(rate), SlotWAL: -1}, rate)
		rate = d.RowsPerSec
		if i >= 50 {
			sum += rate
			if latency(rate) > base+base/10 {
				over++
			}
		}
	}
	mean := sum / float64(steps-50)
	if over > (steps-50)/10 {
		t.Fatalf("over the limit on %d of %d steps", over, steps-50)
	}
	if mean < 0.5*20000 || mean > 20000 {
		t.Fatalf("mean rate %.0f rows/s, want between half of 20000 and 20000", mean)
	}
}

// The probe latency is smoothed: a lone spike does not cut the rate, a
// sustained rise does within a few readings.
func TestControllerSmoothsTheProbe(t *testing.T) {
	c := Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}, SourceBaseline: 10 * ms}
	calm, high := Signals{SourceProbe: 10 * ms, SlotWAL: -1}, Signals{SourceProbe: 13 * ms, SlotWAL: -1}
	c.Step(calm, 0)
	if d := c.Step(high, 0); d.Cut {
		t.Fatalf("a lone +30%% spike: %+v", d)
	}
	c.Step(calm, 0)
	cuts := 0
	for range 4 {
		if c.Step(high, 0).Cut {
			cuts++
		}
	}
	if cuts == 0 {
		t.Fatal("a sustained +30% rise was never acted on")
	}
}

// plant is a simulated shard: its probe latency is flat up to a knee rate
// and rises steeply above it (+10% at 1.05 times the knee, +40% at 1.2, as a
// machine's spare CPU or disk runs out), with noise of its own on every
// reading (noise: the largest deviation, a fraction of the latency).
type plant struct {
	base  time.Duration
	knee  float64
	noise float64
	rng   *rand.Rand
}

// latency is the plant's latency at rate without noise.
func (p *plant) latency(rate float64) time.Duration {
	over := max(0, rate-p.knee) / p.knee
	return p.base + time.Duration(float64(p.base)*2*over)
}

// read is one noisy reading at rate.
func (p *plant) read(rate float64) Signals {
	n := p.noise * (2*p.rng.Float64() - 1)
	return Signals{SourceProbe: p.latency(rate) + time.Duration(float64(p.base)*n), SlotWAL: -1}
}

// run measures the baseline as Adaptive does (9 readings with the work
// held; band false forgets its spread), then steps c for steps readings
// from DefaultStartRate and returns the rate after each step and how many
// steps cut.
func (p *plant) run(c *Controller, steps int, band bool) (rates []float64, cuts int) {
	var idle []time.Duration
	for range 9 {
		idle = append(idle, p.read(0).SourceProbe)
	}
	c.SourceBaseline, c.SourceNoise = baseline(idle)
	if !band {
		c.SourceNoise = 0
	}
	rate := DefaultStartRate
	for range steps {
		d := c.Step(p.read(rate), rate)
		if d.Cut {
			cuts++
		}
		rate = d.RowsPerSec
		rates = append(rates, rate)
	}
	return rates, cuts
}

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// A shard that bears 30,000 rows/s, with probe noise of ±15% (more than the
// +10% target) on every reading: after a minute the law stays near the
// knee — not at its floor (where the law without the baseline's spread and
// with a timid increase sat on the bench), not far past it — and the
// shard's true latency stays within the limit the law was given (the target
// over the spread it measured) on average, and on most steps: AIMD crosses
// the limit now and then, by design, and comes back.
func TestControllerFindsTheKnee(t *testing.T) {
	for seed := range uint64(20) {
		p := &plant{base: 200 * time.Microsecond, knee: 30000, noise: 0.15, rng: rand.New(rand.NewPCG(seed, 1))}
		c := Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}}
		rates, _ := p.run(&c, 300, true)
		limit := c.SourceBaseline + c.SourceNoise + c.SourceBaseline/10
		settled := rates[60:]
		over := 0
		var sum time.Duration
		for _, r := range settled {
			if p.latency(r) > limit {
				over++
			}
			sum += p.latency(r)
		}
		if m := mean(settled); m < 0.7*p.knee || m > 1.2*p.knee {
			t.Errorf("seed %d: mean rate %.0f rows/s after a minute, want within 0.7–1.2 × the knee %.0f", seed, m, p.knee)
		}
		if avg := sum / time.Duration(len(settled)); avg > limit || over > 2*len(settled)/5 {
			t.Errorf("seed %d: the true latency %s on average, over the limit (%s) on %d of %d steps", seed, avg, limit, over, len(settled))
		}
	}
}

// Noise alone — a shard with no load from the work at all, its probe
// jumping ±25% — does not hold the rate down once the baseline's spread is
// known; without it the same readings cut far more often (the law the bench
// found at its floor).
func TestControllerIgnoresNoiseWithinTheBaseline(t *testing.T) {
	const limit = 50000.0
	var with, without int
	for seed := range uint64(20) {
		p := &plant{base: 200 * time.Microsecond, knee: math.Inf(1), noise: 0.25, rng: rand.New(rand.NewPCG(seed, 2))}
		c := Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}, Max: limit}
		rates, cuts := p.run(&c, 200, true)
		if m := mean(rates[50:]); m < 0.9*limit || cuts > 2 {
			t.Errorf("seed %d: within the band: mean rate %.0f rows/s, %d cuts in 200 steps; want at least %.0f and at most 2", seed, m, cuts, 0.9*limit)
		}
		with += cuts
		p.rng = rand.New(rand.NewPCG(seed, 2))
		c = Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}, Max: limit}
		_, cuts = p.run(&c, 200, false)
		without += cuts
	}
	if without < 10*max(with, 1) {
		t.Errorf("%d cuts with the baseline's spread, %d without: the spread should spare most of them", with, without)
	}
	t.Logf("cuts in 20 × 200 steps of noise alone: %d with the baseline's spread, %d without", with, without)
}
