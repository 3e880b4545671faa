// Package layering holds the test of the dependency rules of
// docs/architecture.md ("Dependencies").
package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/reshard/reshard/"

// deps lists every package pkg depends on, itself excluded (go list -deps:
// the build's import graph, test files left out).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var ds []string
	for _, d := range strings.Fields(string(out)) {
		if d != mod+pkg {
			ds = append(ds, d)
		}
	}
	return ds
}

// stdlib: a standard-library path has no dot in its first element.
func stdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// The domain packages: the protocol's data plane and its pure core.
var domain = []string{"ring", "keyspace", "topology", "tableset", "plan", "fence", "backfill", "cdc", "verify", "cutover", "rollback", "capacity"}

func TestDependencyRules(t *testing.T) {
	// ring and keyspace are pure: the standard library only.
	for _, p := range []string{"ring", "keyspace"} {
		for _, d := range deps(t, p) {
			if !stdlib(d) {
				t.Errorf("%s imports %s: it may import nothing outside the standard library", p, d)
			}
		}
	}
	// Domain packages know nothing of Temporal, the activities or the
	// workflows.
	for _, p := range domain {
		for _, d := range deps(t, p) {
			if strings.HasPrefix(d, "go.temporal.io/") || d == mod+"activities" || d == mod+"workflows" || strings.HasPrefix(d, mod+"cmd/") {
				t.Errorf("domain package %s imports %s", p, d)
			}
		}
	}
	// The workflows are orchestration only: no data-plane package, no
	// database driver, no metrics library.
	for _, d := range deps(t, "workflows") {
		for _, bad := range []string{"github.com/jackc/", "github.com/prometheus/"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("workflows imports %s", d)
			}
		}
		if strings.HasPrefix(d, mod) && d != mod+"ring" && d != mod+"keyspace" {
			t.Errorf("workflows imports %s: it may import only the pure ring and keyspace of this module", d)
		}
	}
}

// The test must be able to fail: a package known to import pgx is caught.
func TestDependencyRulesSeeImports(t *testing.T) {
	var pgx bool
	for _, d := range deps(t, "tableset") {
		pgx = pgx || strings.HasPrefix(d, "github.com/jackc/pgx/")
	}
	if !pgx {
		t.Fatal("go list -deps does not show tableset's pgx import: the rules above would check nothing")
	}
}
