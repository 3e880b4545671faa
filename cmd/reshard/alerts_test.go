package main

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Every metric the alert rules use is registered by the worker or the
// router (or is Prometheus' own up), every alert has a runbook section in
// docs/operations.md, and prometheus.yml loads the rules.
func TestAlertRulesUseRegisteredMetrics(t *testing.T) {
	labels := registeredMetrics(t)
	b, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			ms := exprMetric.FindAllString(r.Expr, -1)
			if len(ms) == 0 && !strings.Contains(r.Expr, "up{") {
				t.Errorf("alert %s uses no reshard metric: %s", r.Alert, r.Expr)
			}
			for _, m := range ms {
				if _, ok := labels[baseMetric(labels, m)]; !ok {
					t.Errorf("alert %s uses %s, which nothing registers", r.Alert, m)
				}
			}
			anchor := strings.ToLower(r.Alert)
			if r.Annotations["runbook"] != "docs/operations.md#"+anchor || !strings.Contains(string(ops), "### "+r.Alert+"\n") {
				t.Errorf("alert %s: runbook %q; want docs/operations.md#%s and a section \"### %s\" there", r.Alert, r.Annotations["runbook"], anchor, r.Alert)
			}
		}
	}
	if n < 5 {
		t.Fatalf("%d alert rules", n)
	}
	prom, err := os.ReadFile("../../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prom), "/etc/prometheus/alerts.yml") {
		t.Error("prometheus.yml does not load alerts.yml")
	}
}
