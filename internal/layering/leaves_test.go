package layering

import (
	"os/exec"
	"strings"
	"testing"
)

// internalLeafViolations are the imports of the internal packages (pkgs: their
// paths without the module prefix, deps: go list -deps of each) that reach
// back up into the module: internal/ holds only leaf helpers (SQLSTATEs, DDL
// text, CSV, sessions, metrics registration), which every layer may import
// because they import nothing of the module outside internal/. The test
// harness that builds on the domain (pgtest, movetest, ledger) lives in
// testkit/, and the demo in demo/.
func internalLeafViolations(deps map[string][]string) []string {
	var bad []string
	for pkg, ds := range deps {
		for _, d := range ds {
			q, ok := strings.CutPrefix(d, mod)
			if ok && !strings.HasPrefix(q, "internal/") {
				bad = append(bad, pkg+" imports "+q+": an internal package is a leaf; a helper that needs the domain belongs in testkit/")
			}
		}
	}
	return bad
}

func TestInternalIsLeaves(t *testing.T) {
	out, err := exec.Command("go", "list", mod+"internal/...").Output()
	if err != nil {
		t.Fatalf("go list internal/...: %v", err)
	}
	all := map[string][]string{}
	for _, p := range strings.Fields(string(out)) {
		q := strings.TrimPrefix(p, mod)
		if q == "internal/layering" {
			continue // this test: it lists the module, it builds nothing
		}
		all[q] = deps(t, q)
	}
	if len(all) < 5 {
		t.Fatalf("go list found %d internal packages: the rule would check nothing", len(all))
	}
	for _, b := range internalLeafViolations(all) {
		t.Error(b)
	}
}

// The rule must be able to fail: the harness's own imports, as they were
// before it left internal/, are caught.
func TestInternalIsLeavesSeesViolations(t *testing.T) {
	bad := internalLeafViolations(map[string][]string{"internal/movetest": deps(t, "testkit/movetest")})
	if len(bad) == 0 {
		t.Fatal("movetest imports the domain, and the rule saw nothing")
	}
}
