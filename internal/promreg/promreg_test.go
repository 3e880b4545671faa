package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	newVec := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_test_total", Help: "a test counter"}, []string{"move"})
	}
	first := Register(reg, newVec())
	second := Register(reg, newVec())
	if first != second {
		t.Fatal("a second registration of the same metric did not reuse the first")
	}
	second.WithLabelValues("m1").Inc()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Fatalf("gathered %v, %v; want one counter at 1", mfs, err)
	}
	if c := Register(nil, newVec()); c == nil {
		t.Fatal("a nil registry returns the collector unregistered")
	}
	defer func() {
		if recover() == nil {
			t.Error("a gauge named like a registered counter did not panic")
		}
	}()
	Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "reshard_test_total", Help: "a test counter"}))
}
