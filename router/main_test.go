package router

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newControl returns a migrated control database's store.
func newControl(t *testing.T) (*topology.Store, *pgtest.DB) {
	t.Helper()
	db := pgtest.NewDB(t, 0)
	if err := topology.Migrate(testCtx(t), db.Pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return topology.NewStore(db.Pool), db
}

// register registers shards with a harmless connection reference.
func register(t *testing.T, s *topology.Store, names ...string) {
	t.Helper()
	for _, n := range names {
		ref := topology.ConnRef{Host: "127.0.0.1", Port: 5432, Database: n, User: "app"}
		if err := s.RegisterShard(testCtx(t), topology.Shard{Name: n, Conn: ref, State: topology.ShardActive}); err != nil {
			t.Fatalf("register %s: %v", n, err)
		}
	}
}

// mustTopo is the topology of the ring of vnodes, or fails the test.
func mustTopo(t *testing.T, vnodes []ring.VNode, migrating []topology.RangeState, reason string) topology.Topology {
	t.Helper()
	r, err := ring.New(vnodes)
	if err == nil {
		var topo topology.Topology
		if topo, err = topology.New(r, migrating, reason); err == nil {
			return topo
		}
	}
	t.Fatalf("topology: %v", err)
	return topology.Topology{}
}

// mustPublish publishes topo on version expected, or fails the test.
func mustPublish(t *testing.T, s *topology.Store, expected int64, topo topology.Topology) {
	t.Helper()
	if _, err := s.Publish(testCtx(t), expected, topo); err != nil {
		t.Fatalf("publish on %d: %v", expected, err)
	}
}

// single is a ring giving every token to one shard.
func single(shard string) []ring.VNode { return []ring.VNode{{Token: 0, Shard: shard}} }

// halves gives [MinToken, 0] to lo and (0, MaxToken] to hi.
func halves(lo, hi string) []ring.VNode {
	return []ring.VNode{{Token: 0, Shard: lo}, {Token: ring.MaxToken, Shard: hi}}
}

// counterValue reads a counter or gauge.
func counterValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func histogramCount(t *testing.T, h prometheus.Metric) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.Histogram.GetSampleCount()
}

// keyWithToken finds an integer key whose token satisfies want.
func keyWithToken(t *testing.T, want func(int64) bool) int64 {
	t.Helper()
	k := int64(1)
	for ; !want(ring.TokenInt64(k)); k++ {
		if k == 100000 {
			t.Fatal("no key found")
		}
	}
	return k
}

// pools are the shards' pools by name.
func pools(dbs map[string]*pgtest.DB) map[string]*pgxpool.Pool {
	out := make(map[string]*pgxpool.Pool, len(dbs))
	for name, db := range dbs {
		out[name] = db.Pool
	}
	return out
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}
