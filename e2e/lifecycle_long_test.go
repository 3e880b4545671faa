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
