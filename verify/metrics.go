package verify

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/reshard/reshard/internal/promreg"
)

// Metrics counts what verify does. A nil *Metrics counts nothing.
type Metrics struct {
	chunks     *prometheus.CounterVec
	rows       *prometheus.CounterVec
	mismatches *prometheus.CounterVec
}

// NewMetrics registers verify's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		chunks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reshard_verify_chunks_total",
			Help: "Chunks verified, by result: ok, mismatch, resumed (accepted from an earlier attempt of the run).",
		}, []string{"result"}),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reshard_verify_rows_total",
			Help: "Rows read for comparison, by side: source, target.",
		}, []string{"side"}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reshard_verify_mismatches_total",
			Help: "Rows found differing, by kind: missing, extra, different.",
		}, []string{"kind"}),
	}
	m.chunks = promreg.Register(reg, m.chunks)
	m.rows = promreg.Register(reg, m.rows)
	m.mismatches = promreg.Register(reg, m.mismatches)
	return m
}

func (m *Metrics) chunk(c ChunkReport) {
	if m == nil {
		return
	}
	switch {
	case c.Resumed:
		m.chunks.WithLabelValues("resumed").Inc()
		return
	case c.Mismatches > 0:
		m.chunks.WithLabelValues("mismatch").Inc()
	default:
		m.chunks.WithLabelValues("ok").Inc()
	}
	m.rows.WithLabelValues("source").Add(float64(c.SourceRows))
	m.rows.WithLabelValues("target").Add(float64(c.TargetRows))
}

func (m *Metrics) mismatch(k Kind) {
	if m != nil {
		m.mismatches.WithLabelValues(string(k)).Inc()
	}
}
