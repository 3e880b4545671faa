package router

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/reshard/reshard/internal/promreg"
)

// Metrics of a Router. A nil *Metrics records nothing. The labels carry
// versions and sources only: never a DSN, key or shard credential.
type Metrics struct {
	requests      *prometheus.CounterVec // by ring_version
	fenceRetries  prometheus.Counter
	fenceWaits    prometheus.Histogram
	fencedOuts    prometheus.Counter
	fallbackReads prometheus.Counter
	version       prometheus.Gauge
	refreshes     *prometheus.CounterVec // by source: initial, listen, notify, poll, fence, manual
	stale         prometheus.Counter
}

// NewMetrics creates the router metrics and registers them with reg (when not
// nil). Two routers in one process need two registerers, e.g.
// prometheus.WrapRegistererWith(prometheus.Labels{"table_set": "users"}, reg).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reshard_router_requests_total",
			Help: "Requests routed, by the topology (ring) version that routed them.",
		}, []string{"ring_version"}),
		fenceRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reshard_router_fence_retries_total",
			Help: "Requests retried after a shard refused them with the fence error (SQLSTATE " + FenceSQLState + ").",
		}),
		fenceWaits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reshard_router_fence_wait_seconds",
			Help:    "Time requests that met a fence spent waiting for it to lift (retrying), whether they then succeeded or gave up.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
		}),
		fencedOuts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reshard_router_fenced_total",
			Help: "Requests that gave up on a fence after MaxFenceWait or their deadline (the application got a FencedError).",
		}),
		fallbackReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reshard_router_fallback_reads_total",
			Help: "Reads that found nothing on the new owner of a migrating range and were answered by the old owner.",
		}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reshard_router_topology_version",
			Help: "Topology version the router currently routes with.",
		}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reshard_router_topology_updates_total",
			Help: "Topology versions adopted, by what brought them (initial, listen, notify, poll, fence, manual).",
		}, []string{"source"}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reshard_router_stale_topologies_total",
			Help: "Topology versions offered to the router that were not newer than the one it holds (ignored).",
		}),
	}
	m.requests = promreg.Register(reg, m.requests)
	m.fenceRetries = promreg.Register(reg, m.fenceRetries)
	m.fenceWaits = promreg.Register(reg, m.fenceWaits)
	m.fencedOuts = promreg.Register(reg, m.fencedOuts)
	m.fallbackReads = promreg.Register(reg, m.fallbackReads)
	m.version = promreg.Register(reg, m.version)
	m.refreshes = promreg.Register(reg, m.refreshes)
	m.stale = promreg.Register(reg, m.stale)
	return m
}

// requestCounter returns the counter of one version, so that the hot path
// increments without building label values.
func (m *Metrics) requestCounter(version int64) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.requests.WithLabelValues(strconv.FormatInt(version, 10))
}

// adopted records the move to version v. The router keeps a requests series
// for the version it routes with and the one before (requests in flight);
// retire names the series to drop, so the label set stays bounded.
func (m *Metrics) adopted(retire, v int64, source string) {
	if m == nil {
		return
	}
	m.version.Set(float64(v))
	m.refreshes.WithLabelValues(source).Inc()
	if retire > 0 {
		m.requests.DeleteLabelValues(strconv.FormatInt(retire, 10))
	}
}

func (m *Metrics) staleOffer() {
	if m != nil {
		m.stale.Inc()
	}
}

func (m *Metrics) fenceRetry() {
	if m != nil {
		m.fenceRetries.Inc()
	}
}

func (m *Metrics) fenceWait(d time.Duration) {
	if m != nil {
		m.fenceWaits.Observe(d.Seconds())
	}
}

func (m *Metrics) fencedOut() {
	if m != nil {
		m.fencedOuts.Inc()
	}
}

func (m *Metrics) fallbackRead() {
	if m != nil {
		m.fallbackReads.Inc()
	}
}
