package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
)

// runRing measures the ring (pure Go, no servers): the scale-out simulation,
// the router's Owner lookup and planning a large ring.
func runRing(ctx context.Context, _ *env, r *report) error {
	for _, sim := range []ring.SimOptions{
		{Shards: 4, Add: 1, VNodes: 16, Keys: 1_000_000},
		{Shards: 4, Add: 1, VNodes: 256, Keys: 1_000_000, Algos: []string{"ring-hash"}},
	} {
		res, err := ring.Simulate(sim)
		if err != nil {
			return err
		}
		for _, s := range res {
			goal := ""
			switch {
			case s.Algo == "ring-balanced":
				goal = "; goal 0.20 ± 0.01 with max_over_mean ≤ 1.05"
			case s.Algo == "ring-hash" && sim.VNodes == 256:
				goal = "; goal 0.20 ± 0.03"
			}
			name := fmt.Sprintf("moved_fraction %s (%d tokens)", s.Algo, s.Tokens)
			r.add(name, s.MovedFraction, "fraction", fmt.Sprintf("moved %.4f; 4 shards + 1, %d keys, ideal %.2f, max_over_mean %.4f%s", s.MovedFraction, sim.Keys, s.IdealFraction, s.MaxOverMean, goal))
		}
	}
	var shards []ring.Shard
	for i := 0; i < 64; i++ {
		shards = append(shards, ring.Shard{Name: fmt.Sprintf("shard-%d", i)})
	}
	rg, err := ring.Build(shards, ring.Options{VNodes: 256, Tokens: ring.AllocHash})
	if err != nil {
		return err
	}
	toks := make([]int64, 4096)
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := range toks {
		toks[i] = int64(rnd.Uint64())
	}
	var sink string
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			sink = rg.Owner(toks[i&4095])
		}
	})
	_ = sink
	r.add("ring_owner_ns_per_op", float64(res.NsPerOp()), "ns/op", fmt.Sprintf("64 shards × 256 vnodes, %d allocs/op over %d lookups; goal ≤ 100 ns, 0 allocs", res.AllocsPerOp(), res.N))

	shards = shards[:0]
	for i := 0; i < 1000; i++ {
		shards = append(shards, ring.Shard{Name: fmt.Sprintf("shard-%d", i)})
	}
	o := ring.Options{VNodes: 256, Tokens: ring.AllocBalanced}
	big, err := ring.Build(shards, o)
	if err != nil {
		return err
	}
	var best time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		if _, _, err := ring.PlanAddNode(big, ring.Shard{Name: "new"}, o); err != nil {
			return err
		}
		if d := time.Since(start); best == 0 || d < best {
			best = d
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	r.add("ring_plan_add_node_1000x256_ms", float64(best.Microseconds())/1000, "ms", "balanced tokens, best of 3; goal < 100 ms")
	return nil
}
