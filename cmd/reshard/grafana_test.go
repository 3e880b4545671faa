package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/activities"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/worker"
)

// descRecorder is a Registerer that keeps the collectors registered with it.
type descRecorder struct{ cs []prometheus.Collector }

func (r *descRecorder) Register(c prometheus.Collector) error { r.cs = append(r.cs, c); return nil }
func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	r.cs = append(r.cs, cs...)
}
func (r *descRecorder) Unregister(prometheus.Collector) bool { return false }

var (
	descName   = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	exprMetric = regexp.MustCompile(`reshard_[a-z_]+`)
	exprBy     = regexp.MustCompile(`by \(([^)]*)\)`)
)

// registeredMetrics names every metric the worker (activities with
// backfill, cdc, verify; the control database's gauges; the workflows' phase
// histogram) or the router registers, with its variable labels.
func registeredMetrics(t *testing.T) map[string][]string {
	t.Helper()
	rec := &descRecorder{}
	activities.NewMetrics(rec)
	rec.MustRegister((&activities.Activities{}).ControlCollector())
	router.NewMetrics(rec)
	worker.NewPhaseMetricsHandler(rec)
	rec.MustRegister(worker.NewMoveStateCollector(nil, nil))
	labels := map[string][]string{} // metric → variable labels
	for _, c := range rec.cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			s := d.String()
			name := descName.FindStringSubmatch(s)[1]
			var ls []string
			if m := descLabels.FindStringSubmatch(s); m != nil && m[1] != "" {
				for _, l := range strings.Split(m[1], ",") {
					ls = append(ls, strings.TrimSpace(l))
				}
			}
			labels[name] = ls
		}
	}
	if len(labels) < 20 {
		t.Fatalf("found only %d metrics: %v", len(labels), labels)
	}
	return labels
}

// baseMetric strips a histogram's series suffix from name, when the result
// is a known metric.
func baseMetric(labels map[string][]string, name string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if _, ok := labels[name]; !ok {
			name = strings.TrimSuffix(name, suf)
		}
	}
	return name
}

// Every metric and label the dashboard queries is one the worker or the
// router registers, and every one they register is on a panel.
func TestGrafanaDashboardUsesRegisteredMetrics(t *testing.T) {
	labels := registeredMetrics(t)
	b, err := os.ReadFile("../../docs/grafana/reshard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			var allowed []string
			for _, m := range exprMetric.FindAllString(tg.Expr, -1) {
				base := baseMetric(labels, m)
				ls, ok := labels[base]
				if !ok {
					t.Errorf("panel %q queries %s, which nothing registers", p.Title, m)
					continue
				}
				used[base] = true
				allowed = append(allowed, ls...)
			}
			for _, by := range exprBy.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(by[1], ",") {
					if l = strings.TrimSpace(l); l != "le" && !slices.Contains(allowed, l) {
						t.Errorf("panel %q groups by %q, not a label of its metrics (%v): %s", p.Title, l, allowed, tg.Expr)
					}
				}
			}
		}
	}
	for name := range labels {
		if !used[name] {
			t.Errorf("metric %s is on no panel", name)
		}
	}
}
