package topology

import (
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// EnsureClusterID makes the id on a control database without the schema
// (one from before cluster ids), then keeps it.
func TestEnsureClusterID(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.NewDB(t, 0)
	s := NewStore(db.Pool)
	if _, err := s.ClusterID(ctx); err == nil {
		t.Fatal("a database without the schema has a cluster id")
	}
	id, err := s.EnsureClusterID(ctx)
	if err != nil || !strings.HasPrefix(id, "cluster-") {
		t.Fatalf("EnsureClusterID: %q, %v", id, err)
	}
	if again, err := s.EnsureClusterID(ctx); err != nil || again != id {
		t.Errorf("a second EnsureClusterID: %q, %v; want %s", again, err, id)
	}
}
