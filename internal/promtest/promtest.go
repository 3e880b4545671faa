// Package promtest reads metrics back from a Prometheus registry in tests.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Counter is the value of the counter name of reg that has a label with the
// value label, or, with label "", of the counter without labels (0 when
// there is none).
func Counter(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
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
			if label == "" && len(m.GetLabel()) == 0 {
				return m.GetCounter().GetValue()
			}
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// Gauge is the value of the gauge name of reg whose label values include
// every one of labels (0 when there is none).
func Gauge(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, want := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetValue() == want
				}
				if !found {
					continue metrics
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
