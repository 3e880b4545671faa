package topology

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newControl returns a migrated control database's store.
func newControl(t *testing.T) (*Store, *pgtest.DB) {
	t.Helper()
	db := pgtest.NewDB(t, 0)
	if err := Migrate(testCtx(t), db.Pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return NewStore(db.Pool), db
}

// register registers shards with a harmless connection reference.
func register(t *testing.T, s *Store, names ...string) {
	t.Helper()
	for _, n := range names {
		sh := Shard{Name: n, Conn: ConnRef{Host: "127.0.0.1", Port: 5432, Database: n, User: "app"}, State: ShardActive}
		if err := s.RegisterShard(testCtx(t), sh); err != nil {
			t.Fatalf("register %s: %v", n, err)
		}
	}
}

// mustTopo builds a topology or fails the test.
func mustTopo(t *testing.T, vnodes []ring.VNode, migrating []RangeState, reason string) Topology {
	t.Helper()
	r, err := ring.New(vnodes)
	if err != nil {
		t.Fatalf("ring: %v", err)
	}
	topo, err := New(r, migrating, reason)
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	return topo
}

// single is a ring giving every token to one shard.
func single(shard string) []ring.VNode { return []ring.VNode{{Token: 0, Shard: shard}} }

// halves gives [MinToken, 0] to lo and (0, MaxToken] to hi.
func halves(lo, hi string) []ring.VNode {
	return []ring.VNode{{Token: 0, Shard: lo}, {Token: ring.MaxToken, Shard: hi}}
}

func mustPublish(t *testing.T, s *Store, expected int64, topo Topology) Topology {
	t.Helper()
	got, err := s.Publish(testCtx(t), expected, topo)
	if err != nil {
		t.Fatalf("publish on %d: %v", expected, err)
	}
	return got
}

// keyWithToken finds an integer key whose token satisfies want.
func keyWithToken(t *testing.T, want func(int64) bool) int64 {
	t.Helper()
	for k := int64(1); k < 100000; k++ {
		if want(ring.TokenInt64(k)) {
			return k
		}
	}
	t.Fatal("no key found")
	return 0
}

func pools(m map[string]*pgtest.DB) map[string]*pgxpool.Pool {
	out := map[string]*pgxpool.Pool{}
	for k, v := range m {
		out[k] = v.Pool
	}
	return out
}
