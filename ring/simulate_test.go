package ring

import (
	"math"
	"testing"
)

func TestSimulateScaleOut(t *testing.T) {
	res, err := Simulate(SimOptions{Shards: 4, Add: 1, VNodes: 16, Keys: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]SimResult{}
	for _, r := range res {
		got[r.Algo] = r
		if r.IdealFraction != 0.2 {
			t.Errorf("%s ideal %v", r.Algo, r.IdealFraction)
		}
	}
	if len(got) != len(Algorithms) {
		t.Fatalf("results for %d algorithms: %v", len(got), res)
	}
	within := func(algo string, want, tol, maxMOM float64) {
		t.Helper()
		r := got[algo]
		if math.Abs(r.MovedFraction-want) > tol {
			t.Errorf("%s moved %.4f, want %.2f ± %.2f", algo, r.MovedFraction, want, tol)
		}
		if r.MaxOverMean > maxMOM || r.MaxOverMean < 1 {
			t.Errorf("%s max/mean %.4f, want in [1, %.2f]", algo, r.MaxOverMean, maxMOM)
		}
	}
	within("modulo", 0.8, 0.01, 1.02)
	within("ring-balanced", 0.2, 0.01, 1.05)
	within("rendezvous", 0.2, 0.01, 1.02)
	within("jump", 0.2, 0.01, 1.02)
	within("slots", 0.2, 0.01, 1.02)
	within("ring-hash", 0.2, 0.10, 2) // 16 hashed vnodes: rough, as the articles show
	if r := got["slots"]; r.Tokens != SlotCount {
		t.Errorf("slots tokens %d", r.Tokens)
	}
}

func TestSimulateHash256(t *testing.T) {
	res, err := Simulate(SimOptions{Shards: 4, Add: 1, VNodes: 256, Keys: 200_000, Algos: []string{"ring-hash"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || math.Abs(res[0].MovedFraction-0.2) > 0.03 {
		t.Fatalf("hash ring at 256 vnodes: %+v, want moved 0.20 ± 0.03", res)
	}
}

func TestSimulateRejects(t *testing.T) {
	for _, o := range []SimOptions{{Shards: 0, Add: 1, VNodes: 1, Keys: 1}, {Shards: 2, Add: 0, VNodes: 1, Keys: 1}, {Shards: 2, Add: 1, VNodes: 1, Keys: 1, Algos: []string{"nope"}}} {
		if _, err := Simulate(o); err == nil {
			t.Errorf("Simulate(%+v) accepted", o)
		}
	}
}

func TestJumpAndSlotsMoveOnlyToNewShards(t *testing.T) {
	for k := uint64(0); k < 10000; k++ {
		key := mix64(k)
		a, b := jump(key, 7), jump(key, 8)
		if a != b && b != 7 {
			t.Fatalf("jump moved key %d from %d to old bucket %d", key, a, b)
		}
	}
	before, after := slotTables(5, 7)
	count := make([]int, 7)
	for s := range before {
		if before[s] != after[s] && after[s] < 5 {
			t.Fatalf("slot %d moved between old shards", s)
		}
		count[after[s]]++
	}
	for i, c := range count {
		if c < SlotCount/7 || c > SlotCount/7+1 {
			t.Errorf("shard %d has %d slots", i, c)
		}
	}
}
