// Package promreg is the one rule by which reshard registers a metric:
// every package's NewMetrics(reg prometheus.Registerer) registers each of
// its collectors with Register, and only the process that serves the
// metrics (the worker) makes a registry (STYLE.md: no global registry, no
// init()). internal/layering TestOneMetricsRule holds the rule.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns the collector to use: c, or the
// one of the same description already registered there (two workers'
// activities, or two routers, on one registry share their series). A nil
// reg registers nothing (a package used without metrics). A clash with a
// different kind of metric of the same name is a programming error: it
// panics, as prometheus.MustRegister does.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
