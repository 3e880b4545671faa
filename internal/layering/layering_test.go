// Package layering holds the test of the dependency rules of
// docs/architecture.md ("Dependencies").
package layering

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/reshard/reshard/"

// deps lists every package pkg depends on, itself excluded (go list -deps:
// the build's import graph, test files left out).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	if ds, ok := depsCache[pkg]; ok {
		return ds
	}
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
	depsCache[pkg] = ds
	return ds
}

// depsCache keeps go list's answers for the package's tests, which run one
// after the other: each package is listed once.
var depsCache = map[string][]string{}

// stdlib: a standard-library path has no dot in its first element.
func stdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// The domain packages: the protocol's data plane and its pure core.
var domain = []string{"ring", "keyspace", "keyspace/register", "topology", "tableset", "shardschema", "csvload", "plan", "fence", "backfill", "cdc", "verify", "cutover", "join", "cleanup", "rollback", "capacity", "router", "eta", "topocheck"}

func TestDependencyRules(t *testing.T) {
	// ring, keyspace and eta are pure: the standard library only.
	for _, p := range []string{"ring", "keyspace", "eta"} {
		for _, d := range deps(t, p) {
			if !stdlib(d) {
				t.Errorf("%s imports %s: it may import nothing outside the standard library", p, d)
			}
		}
	}
	// Domain packages know nothing of Temporal, the activities, the worker
	// or the workflows.
	for _, p := range domain {
		for _, d := range deps(t, p) {
			if strings.HasPrefix(d, "go.temporal.io/") || d == mod+"activities" || d == mod+"worker" || d == mod+"workflows" || strings.HasPrefix(d, mod+"cmd/") {
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

// domainOrder is the order among the domain packages: a package may import
// only domain packages of a lower level (transitively, so the order holds
// through every path). The order follows a move's life: the pure core; the
// catalog; the stores and the stream; what each phase builds on them; the
// cutover; the phases around it (JOINING, CLEANUP); rollback, which undoes
// any of them.
var domainOrder = map[string]int{
	"ring": 0, "keyspace": 0, "eta": 0, // pure
	"tableset": 1,           // the tables of a keyspace, read from a shard's catalog
	"topology": 2, "cdc": 2, // the control database; the stream
	"fence": 3, "backfill": 3, "verify": 3, // the invariant's mechanism; SNAPSHOT_COPY; VERIFY
	"router":            3,               // the application's router: the topology, nothing of a move
	"shardschema":       3,               // a keyspace's tables made alike across shards (schema sync, apply)
	"keyspace/register": 4,               // tables registered after checks on every shard, then fenced
	"csvload":           4,               // reshard load: rows routed by token (router's fence error)
	"capacity":          4,               // PLAN's cost model (it measures with backfill's copy and verify's checksum)
	"cutover":           4,               // the step sequence, journal, dry run
	"join":              5, "cleanup": 5, // JOINING; CLEANUP and the end of a move
	"plan":      5, // PLAN: the plan, its preflight, its cost (capacity), its cutover's dry run
	"rollback":  6,
	"topocheck": 7, // topology check: reads every phase's traces (journals, holds, strays)
}

// forbidden are imports the order alone would allow but the design does
// not: the cutover hands ranges over and never copies, deletes or
// compares rows (CLEANUP, which deletes them, is package cleanup's).
var forbidden = [][2]string{{"cutover", "backfill"}, {"cutover", "verify"}}

// orderViolations are the imports of pkg (deps: go list -deps) that break
// domainOrder or forbidden.
func orderViolations(pkg string, deps []string) []string {
	var bad []string
	for _, d := range deps {
		q, ok := strings.CutPrefix(d, mod)
		if !ok {
			continue
		}
		if l, ok := domainOrder[q]; ok && l >= domainOrder[pkg] {
			bad = append(bad, fmt.Sprintf("%s (level %d) imports %s (level %d): a domain package imports only lower levels", pkg, domainOrder[pkg], q, l))
		}
		for _, f := range forbidden {
			if f[0] == pkg && f[1] == q {
				bad = append(bad, fmt.Sprintf("%s imports %s", pkg, q))
			}
		}
	}
	return bad
}

func TestDomainOrder(t *testing.T) {
	for _, p := range domain {
		if _, ok := domainOrder[p]; !ok {
			t.Errorf("domain package %s has no level in domainOrder: place it", p)
		}
	}
	for p := range domainOrder {
		if !slices.Contains(domain, p) {
			t.Errorf("domainOrder names %s, which is not in domain", p)
		}
		for _, b := range orderViolations(p, deps(t, p)) {
			t.Error(b)
		}
	}
}

// The order must be able to fail: a cutover importing backfill, a phase
// importing rollback and two packages of one level are caught.
func TestDomainOrderSeesViolations(t *testing.T) {
	for _, c := range []struct{ pkg, dep string }{{"cutover", "backfill"}, {"join", "rollback"}, {"backfill", "verify"}, {"tableset", "topology"}} {
		if bad := orderViolations(c.pkg, []string{"fmt", mod + c.dep}); len(bad) != 1 {
			t.Errorf("%s importing %s gave %v, want one violation", c.pkg, c.dep, bad)
		}
	}
	if bad := orderViolations("rollback", []string{mod + "cleanup", mod + "cutover", mod + "ring"}); len(bad) != 0 {
		t.Errorf("rollback's imports gave %v, want none", bad)
	}
}

// views are the presentation packages: they turn what a command read (a
// workflow's state, a topology, a plan) into text and JSON. They open no
// connection and start nothing: no database driver, no Temporal client, no
// activities, worker or CLI among their own imports.
var views = []string{"statusview", "planview", "topoview"}

// viewViolations are the imports of a view that open or run something.
func viewViolations(pkg string, imps []string) []string {
	var bad []string
	for _, d := range imps {
		if strings.HasPrefix(d, "github.com/jackc/") || d == "go.temporal.io/sdk/client" || d == mod+"activities" || d == mod+"worker" || strings.HasPrefix(d, mod+"cmd/") {
			bad = append(bad, fmt.Sprintf("view %s imports %s: a view renders what its caller read", pkg, d))
		}
	}
	return bad
}

func TestViewsOnlyRender(t *testing.T) {
	for _, p := range views {
		for _, b := range viewViolations(p, imports(t, p)) {
			t.Error(b)
		}
	}
	// The rule must be able to fail.
	if bad := viewViolations("topoview", []string{"fmt", "github.com/jackc/pgx/v5/pgxpool", "go.temporal.io/sdk/client", mod + "topology"}); len(bad) != 2 {
		t.Errorf("a view importing pgxpool and the Temporal client gave %v, want two violations", bad)
	}
}
