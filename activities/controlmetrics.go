package activities

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/cutover"
)

// controlCollector reads, at each scrape, what only the control database
// knows: whether it answers, and the longest cutover write pause open right
// now (from the cutover journal, as the move's status does). Alerts use both
// (deploy/prometheus/alerts.yml).
type controlCollector struct {
	a             *Activities
	up, openPause *prometheus.Desc
}

// ControlCollector returns the collector of the control database's gauges
// reshard_control_db_up and reshard_cutover_open_write_pause_seconds.
func (a *Activities) ControlCollector() prometheus.Collector {
	return controlCollector{a: a,
		up: prometheus.NewDesc("reshard_control_db_up",
			"1 when the worker reached the control database at this scrape (within 2s), else 0.", nil, nil),
		openPause: prometheus.NewDesc("reshard_cutover_open_write_pause_seconds",
			"The longest cutover write pause open now, over every move (0: none): a source fenced while it still owns its ranges.", nil, nil),
	}
}

func (c controlCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.up; ch <- c.openPause }

func (c controlCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	open, err := c.openPauseNow(ctx)
	up := 1.0
	if err != nil {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	if err == nil {
		ch <- prometheus.MustNewConstMetric(c.openPause, prometheus.GaugeValue, open.Seconds())
	}
}

func (c controlCollector) openPauseNow(ctx context.Context) (time.Duration, error) {
	pool, err := c.a.pools.control(ctx)
	if err != nil {
		return 0, err
	}
	if err := pool.Ping(ctx); err != nil {
		return 0, err
	}
	return cutover.OpenPause(ctx, pool)
}
