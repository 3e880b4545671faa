// Package promtest reads metrics back from a Prometheus registry in tests.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Counter is the value of the counter name of reg that has a label with the
// value label, or, with label "", of the counter without labels (0 when
// there is none).
func Counter(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	m := find(t, reg, name, func(m *dto.Metric) bool {
		if label == "" {
			return len(m.GetLabel()) == 0
		}
		return hasValue(m, label)
	})
	return m.GetCounter().GetValue()
}

// Gauge is the value of the gauge name of reg whose label values include
// every one of labels (0 when there is none).
func Gauge(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	m := find(t, reg, name, func(m *dto.Metric) bool {
		for _, want := range labels {
			if !hasValue(m, want) {
				return false
			}
		}
		return true
	})
	return m.GetGauge().GetValue()
}

// find is the first series of the metric name of reg that match accepts
// (nil when there is none: its getters then read 0).
func find(t testing.TB, reg *prometheus.Registry, name string, match func(*dto.Metric) bool) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if match(m) {
				return m
			}
		}
	}
	return nil
}

// hasValue reports whether one of m's labels has the value v.
func hasValue(m *dto.Metric, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetValue() == v {
			return true
		}
	}
	return false
}
