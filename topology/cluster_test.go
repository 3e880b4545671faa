package topology

import (
	"testing"

	"github.com/reshard/reshard/ring"
)

// MigratingRanges counts the migrating ranges of every keyspace's current
// topology, the default keyspace's included, and none of a keyspace
// without a topology.
func TestMigratingRanges(t *testing.T) {
	s, _ := newControl(t)
	ctx := testCtx(t)
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MigratingRanges(ctx); err != nil || n != 0 {
		t.Fatalf("empty control database: %d (%v), want 0", n, err)
	}
	register(t, s, "a", "b", "c")
	mig := []RangeState{
		{Range: ring.Range{Lo: 1000, Hi: 5000}, Owner: "b", Status: Migrating, From: "b", To: "c"},
		{Range: ring.Range{Lo: -7000, Hi: -6000}, Owner: "a", Status: Migrating, From: "a", To: "c"},
	}
	mustPublish(t, s, 0, mustTopo(t, halves("a", "b"), mig, "split b").WithMigrationID("m-1"))
	if n, err := s.MigratingRanges(ctx); err != nil || n != 2 {
		t.Fatalf("one keyspace, two ranges migrating: %d (%v), want 2", n, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
}
