package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
)

// runRing measures the ring (pure Go, no servers): the scale-out simulation,
// the router's Owner lookup, planning a large ring, and growing a ring by
// several shards in one rebalance against one add-node at a time.
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
	for _, c := range []struct{ from, to int }{{4, 8}, {16, 64}} {
		if err := rebalanceFigures(r, c.from, c.to); err != nil {
			return err
		}
	}
	return nil
}

// rebalanceFigures compares growing a balanced ring (16 vnodes per shard)
// from `from` to `to` shards as one rebalance against one add-node after
// another: the moved fraction of the token space (a key moved by two
// add-nodes is copied twice, so the sequence's fractions add up), and the
// same counted on 1,000,000 sample keys ("key-<i>", hashtextextended).
func rebalanceFigures(r *report, from, to int) error {
	o := ring.Options{VNodes: 16, Tokens: ring.AllocBalanced}
	var shards, added []ring.Shard
	for i := 0; i < from; i++ {
		shards = append(shards, ring.Shard{Name: fmt.Sprintf("shard-%d", i)})
	}
	for i := from; i < to; i++ {
		added = append(added, ring.Shard{Name: fmt.Sprintf("shard-%d", i)})
	}
	old, err := ring.Build(shards, o)
	if err != nil {
		return err
	}
	next, moves, err := ring.PlanRebalance(old, ring.Target{Add: added}, o)
	if err != nil {
		return err
	}
	const keys = 1_000_000
	toks := make([]int64, keys)
	for i := range toks {
		toks[i] = ring.TokenText("key-" + strconv.Itoa(i))
	}
	copied := func(a, b *ring.Ring) int {
		n := 0
		for _, t := range toks {
			if a.Owner(t) != b.Owner(t) {
				n++
			}
		}
		return n
	}
	oneKeys := copied(old, next)
	pairs := map[[2]string]bool{}
	for _, m := range moves {
		pairs[[2]string{m.From, m.To}] = true
	}
	share := next.Share()
	var hi float64
	for _, v := range share {
		hi = max(hi, v)
	}
	seqMoved, seqKeys := 0.0, 0
	cur := old
	for _, s := range added {
		n, mv, err := ring.PlanAddNode(cur, s, o)
		if err != nil {
			return err
		}
		seqMoved += ring.MovedFraction(mv)
		seqKeys += copied(cur, n)
		cur = n
	}
	ideal := float64(to-from) / float64(to)
	one := ring.MovedFraction(moves)
	name := fmt.Sprintf("ring_rebalance_%d_to_%d", from, to)
	r.add(name+"_moved_fraction", one, "fraction", fmt.Sprintf("one rebalance moves %.4f of the token space, ideal %.4f; goal ± 0.01; %d (source, target) pairs; max/mean share %.4f; 16 vnodes per shard",
		one, ideal, len(pairs), hi*float64(to)))
	r.add(name+"_sequential_moved_fraction", seqMoved, "fraction", fmt.Sprintf("%d add-nodes one after another move %.4f of the token space in all (%.2f× the rebalance)", to-from, seqMoved, seqMoved/one))
	r.add(name+"_keys_copied", float64(oneKeys), "keys", fmt.Sprintf("of %d sample keys, one rebalance copies %d (%.4f); %d add-nodes copy %d (%.4f), a key taken by one added shard and then by the next copied twice",
		keys, oneKeys, float64(oneKeys)/keys, to-from, seqKeys, float64(seqKeys)/keys))
	return nil
}
