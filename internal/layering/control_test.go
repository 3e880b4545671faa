package layering

import (
	"os/exec"
	"strings"
	"testing"
)

// controlAllowed are the packages of this module that control, the
// operator's client of the control plane, may import itself: the
// workflows' contract (names, ids, search attributes) and the topology
// store (the workers' own reports). It reaches no data-plane package.
var controlAllowed = []string{"workflows", "topology"}

// controlViolations are the imports of control (go list's Imports: its own,
// not its dependencies') that leave controlAllowed.
func controlViolations(imports []string) []string {
	var bad []string
	for _, d := range imports {
		q, ok := strings.CutPrefix(d, mod)
		if !ok {
			continue
		}
		allowed := false
		for _, a := range controlAllowed {
			allowed = allowed || q == a
		}
		if !allowed {
			bad = append(bad, "control imports "+q+": it speaks to Temporal and reads the workers' reports; the data plane is the worker's")
		}
	}
	return bad
}

// TestControlIsAClient: control imports only the workflows' contract and
// the topology store of this module, and neither the workflows nor the
// activities import it (they are the other side of the calls it makes).
// That no domain package imports it follows from TestDependencyRules:
// control imports Temporal.
func TestControlIsAClient(t *testing.T) {
	for _, b := range controlViolations(imports(t, "control")) {
		t.Error(b)
	}
	for _, p := range []string{"workflows", "activities"} {
		for _, d := range deps(t, p) {
			if d == mod+"control" {
				t.Errorf("%s imports control: the operator's client is not the worker's", p)
			}
		}
	}
}

// The rule must be able to fail: control importing backfill is caught,
// its own imports are not.
func TestControlIsAClientSeesViolations(t *testing.T) {
	if bad := controlViolations([]string{"context", mod + "backfill", mod + "workflows"}); len(bad) != 1 {
		t.Errorf("control importing backfill gave %v, want one violation", bad)
	}
}

// imports lists pkg's own imports (go list's Imports, test files left out).
func imports(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, mod+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}
