package worker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/internal/promreg"
	"github.com/reshard/reshard/workflows"
)

// NewPhaseMetricsHandler returns the SDK metrics handler of a worker: it turns
// the workflows' phase timers into the histogram
// reshard_phase_duration_seconds{phase} and drops the SDK's own metrics.
func NewPhaseMetricsHandler(reg prometheus.Registerer) client.MetricsHandler {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "reshard_phase_duration_seconds",
		Help:    "Time moves spent in each phase.",
		Buckets: prometheus.ExponentialBuckets(0.1, 4, 12), // 0.1 s … ~4.9 days
	}, []string{"phase"})
	return promHandler{hist: promreg.Register(reg, h)}
}

type promHandler struct {
	hist *prometheus.HistogramVec
	tags map[string]string
}

func (p promHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(p.tags)+len(tags))
	for k, v := range p.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return promHandler{hist: p.hist, tags: merged}
}

func (p promHandler) Counter(string) client.MetricsCounter {
	return client.MetricsNopHandler.Counter("")
}
func (p promHandler) Gauge(string) client.MetricsGauge { return client.MetricsNopHandler.Gauge("") }

func (p promHandler) Timer(name string) client.MetricsTimer {
	if name != workflows.PhaseTimer || p.tags["phase"] == "" {
		return client.MetricsNopHandler.Timer(name)
	}
	obs := p.hist.WithLabelValues(p.tags["phase"])
	return timerFunc(func(d time.Duration) { obs.Observe(d.Seconds()) })
}

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }
