package cdc

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/reshard/reshard/internal/promreg"
)

// Metrics are the stream's Prometheus metrics, labelled by move.
type Metrics struct {
	changes   *prometheus.CounterVec
	filtered  *prometheus.CounterVec
	batches   *prometheus.CounterVec
	peeks     *prometheus.CounterVec
	flushes   *prometheus.CounterVec
	lagBytes  *prometheus.GaugeVec
	lagSecs   *prometheus.GaugeVec
	retained  *prometheus.GaugeVec
	positions *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered, for tests and tools).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_cdc_changes_applied_total",
			Help: "Source row changes in the moving ranges applied to the target, by kind (insert, update, delete)."}, []string{"move", "kind"}),
		filtered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_cdc_changes_filtered_total",
			Help: "Source row changes skipped: outside the moving ranges, or of transactions written by an applier (reverse mode)."}, []string{"move"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_cdc_apply_batches_total",
			Help: "Target transactions committed, each holding one or more source transactions."}, []string{"move"}),
		peeks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_cdc_sql_peeks_total",
			Help: "Catch-up reads of the slot by pg_logical_slot_peek_binary_changes, made while the stream was more than its peek threshold behind the source."}, []string{"move"}),
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_cdc_apply_flushes_total",
			Help: "Flushes of one table's pending row operations to the target, by path: staged (binary COPY into a staging table, one statement per kind) or array (text[] parameters, for small flushes)."}, []string{"move", "path"}),
		lagBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_cdc_lag_bytes",
			Help: "Source WAL end seen minus the applied position."}, []string{"move"}),
		lagSecs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_cdc_lag_seconds",
			Help: "Age of the last applied source commit while more is pending; 0 when caught up."}, []string{"move"}),
		retained: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_cdc_slot_retained_wal_bytes",
			Help: "WAL the source keeps for the move's slot (current LSN - restart_lsn)."}, []string{"move"}),
		positions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_cdc_position_lsn",
			Help: "Stream positions as LSN numbers: received, applied, acked."}, []string{"move", "position"}),
	}
	m.changes = promreg.Register(reg, m.changes)
	m.filtered = promreg.Register(reg, m.filtered)
	m.batches = promreg.Register(reg, m.batches)
	m.peeks = promreg.Register(reg, m.peeks)
	m.flushes = promreg.Register(reg, m.flushes)
	m.lagBytes = promreg.Register(reg, m.lagBytes)
	m.lagSecs = promreg.Register(reg, m.lagSecs)
	m.retained = promreg.Register(reg, m.retained)
	m.positions = promreg.Register(reg, m.positions)
	return m
}
