//go:build e2e

package e2e

import "testing"

// TestClusterLifeLong is the whole cluster-life scenario (make e2e): two
// keyspaces (bigint and text keys), add-node → split (the text keyspace) →
// remove-node rolled back at CUTOVER → a range moved back to its former
// owner → remove-node → add-node rolled back in GRACE → add-node again,
// the worker SIGKILLed in every step, every invariant checked after each.
func TestClusterLifeLong(t *testing.T) {
	clusterLife(t, 20_000, 3_000, true)
}

// TestClusterLife is the short form of the cluster-life scenario:
// add-node, a remove-node rolled back at CUTOVER, a range moved back to its
// former owner — the sequence that once left the old shards without fences
// — with the worker killed in every step and every invariant checked after
// each. It ran in make test (2m7s of its 14.5 minutes in CI, the longest
// test there); TestClusterLifeLong runs the same three steps, with the same
// kills and checks, among its others on more data, so make e2e proves what
// it does. Run it alone with go test -tags e2e -run '^TestClusterLife$' ./e2e/.
func TestClusterLife(t *testing.T) {
	clusterLife(t, 3_000, 600, false)
}
