package backfill

import (
	"errors"
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
		{"over the limit halves and names the signal", Controller{Limits: lat, SourceBaseline: 10 * ms, TargetBaseline: 10 * ms}, []step{
			{calm, 0, 2000, SignalNone, ""},
			{slow(11400 * time.Microsecond), 0, 1000, SignalSourceLatency, "source probe latency +14% (11.4ms over 10ms) > +10%"},
			{slow(11400 * time.Microsecond), 0, 500, SignalSourceLatency, "> +10%"},
			// Then additive: a tenth of the rate cut to (50, the floor, is more than 500/10).
			{calm, 0, 550, SignalNone, ""},
			{calm, 0, 600, SignalNone, ""},
		}},
		{"near the limit holds and ends slow start", Controller{Limits: lat, SourceBaseline: 10 * ms, TargetBaseline: 10 * ms}, []step{
			{calm, 0, 2000, SignalNone, ""},
			{slow(10900 * time.Microsecond), 0, 2000, SignalSourceLatency, "holding: source probe latency +9%"},
			{calm, 0, 2200, SignalNone, ""}, // additive now: 2000/10
		}},
		{"the target's probe counts against its own baseline", Controller{Limits: lat, SourceBaseline: 10 * ms, TargetBaseline: 20 * ms}, []step{
			{Signals{SourceProbe: 10 * ms, TargetProbe: 30 * ms, SlotWAL: -1}, 0, 500, SignalTargetLatency, "target probe latency +50%"},
		}},
		{"the worst signal is named", Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10, MaxReplicaLag: 2 * time.Second}, SourceBaseline: 10 * ms}, []step{
			{Signals{SourceProbe: 11400 * time.Microsecond, Replicas: 1, ReplicaLag: 3200 * ms, SlotWAL: -1}, 0, 500, SignalReplicaLag, "replica lag 3.2s > 2s"},
		}},
		{"replica lag is not watched without replicas, nor the slot without one", Controller{Limits: AdaptiveLimits{MaxReplicaLag: time.Second, MaxSlotWAL: 1 << 20}}, []step{
			{Signals{ReplicaLag: time.Hour, SlotWAL: -1}, 0, 2000, SignalNone, ""},
		}},
		{"slot WAL and active backends", Controller{Limits: AdaptiveLimits{MaxSlotWAL: 1 << 30, MaxActiveBackends: 10}}, []step{
			{Signals{SlotWAL: 2 << 30, ActiveBackends: 3}, 0, 500, SignalSlotWAL, "slot WAL 2.0 GiB > 1.0 GiB"},
			{Signals{SlotWAL: 0, ActiveBackends: 12}, 0, 250, SignalActive, "active backends 12 > 10"},
		}},
		{"a probe ceiling", Controller{Limits: AdaptiveLimits{MaxProbeLatency: 5 * ms}}, []step{
			{Signals{SourceProbe: 7 * ms, SlotWAL: -1}, 0, 500, SignalSourceLatency, "source probe latency 7ms > 5ms"},
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
				if d.RowsPerSec != st.rate || d.Signal != st.signal || !strings.Contains(d.Reason, st.reason) {
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
