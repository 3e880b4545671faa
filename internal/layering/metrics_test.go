package layering

import (
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// registryOwners are the files that may make a Prometheus registry: the
// worker, which serves /metrics, and the activities' fallback for a caller
// that passes no metrics (its registry is never served).
var registryOwners = []string{"worker/worker.go", "activities/activities.go"}

// registerForwarders may call a Registerer's Register themselves:
// promreg.Register (the rule), and the activities' moveSeries, a
// Registerer that forwards to the one it wraps.
var registerForwarders = []string{"internal/promreg/promreg.go", "activities/series.go"}

// TestOneMetricsRule: a metric is registered one way (issue #32 item 5):
// promreg.Register(reg, c) in a package's NewMetrics. No MustRegister, no
// Registerer.Register of its own, no promauto and no global registry; a
// registry is made only by whoever serves it.
func TestOneMetricsRule(t *testing.T) {
	for _, v := range metricsRuleViolations(t, "../..") {
		t.Error(v)
	}
}

// The rule must be able to fail: each of the four ways it replaced is
// caught, promreg.Register is not.
func TestOneMetricsRuleSeesOtherWays(t *testing.T) {
	dir := t.TempDir()
	src := `package x

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/reshard/reshard/internal/promreg"
)

func a(reg prometheus.Registerer, c prometheus.Collector) {
	reg.MustRegister(c)
	_ = reg.Register(c)
	prometheus.MustRegister(c)
	_ = prometheus.NewRegistry()
	_ = promauto.With(reg)
	promreg.Register(reg, c)
}
`
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := metricsRuleViolations(t, dir)
	want := []string{"x.go:10: MustRegister", "x.go:11: Register", "x.go:12: MustRegister", "x.go:13: NewRegistry", "x.go:5: imports promauto"}
	if len(got) != len(want) {
		t.Fatalf("found %q, want %d: %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("found %q, want it to begin %q", got[i], want[i])
		}
	}
}

// metricsRuleViolations lists, as "file:line: what", the ways of
// registering a metric other than promreg.Register under root (outside
// cmd/reshard-bench, a benchmark with a registry of its own).
func metricsRuleViolations(t *testing.T, root string) []string {
	t.Helper()
	var found []string
	eachGoFile(t, root, []string{"cmd/reshard-bench", "testdata"}, func(rel string, fset *token.FileSet, f *ast.File) {
		at := func(n ast.Node) string { return rel + ":" + strconv.Itoa(fset.Position(n.Pos()).Line) + ": " }
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/prometheus/client_golang/prometheus/promauto" {
				found = append(found, at(imp)+"imports promauto: register with promreg.Register on the Registerer passed in")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, isCall := n.(*ast.CallExpr)
			var sel *ast.SelectorExpr
			if isCall {
				sel, _ = call.Fun.(*ast.SelectorExpr)
			}
			if sel == nil { // not a method or package function's call
				return true
			}
			switch sel.Sel.Name {
			case "MustRegister":
				found = append(found, at(call)+"MustRegister: register each collector with promreg.Register")
			case "Register":
				if registerer(sel.X) && !slices.Contains(registerForwarders, rel) {
					found = append(found, at(call)+"Register on a Registerer: use promreg.Register")
				}
			case "NewRegistry":
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "prometheus" && !slices.Contains(registryOwners, rel) {
					found = append(found, at(call)+"NewRegistry: take a prometheus.Registerer; only the process serving /metrics makes a registry")
				}
			}
			return true
		})
	})
	slices.Sort(found)
	return found
}

// registerer: the receiver of a Register call looks like a Prometheus
// Registerer (prometheus itself, reg, or a Registerer field). The workflows'
// and activities' own Register (of a Temporal worker) are not.
func registerer(x ast.Expr) bool {
	switch x := x.(type) {
	case *ast.Ident:
		return x.Name == "prometheus" || x.Name == "reg" || strings.HasSuffix(x.Name, "Registerer")
	case *ast.SelectorExpr:
		return x.Sel.Name == "reg" || strings.HasSuffix(x.Sel.Name, "Registerer")
	}
	return false
}
