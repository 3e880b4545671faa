package ring

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// wanted is each shard's weighted share after t, computed here from the
// target alone (not by the planner): the shards of old that stay, with their
// new weights, and the added ones. Among is not supported here.
func wanted(old *Ring, t Target) map[string]float64 {
	w := map[string]float64{}
	for _, s := range old.Shards() {
		if !slices.Contains(t.Remove, s) {
			w[s] = old.Spec(s).weight()
		}
	}
	for _, s := range t.Weights {
		w[s.Name] = s.weight()
	}
	for _, s := range t.Add {
		w[s.Name] = s.weight()
	}
	var total float64
	for _, v := range w {
		total += v
	}
	for s := range w {
		w[s] /= total
	}
	return w
}

// leastMovement is the lower bound of any plan reaching want: every shard
// above its wanted share must lose the difference, removed shards all.
func leastMovement(old *Ring, want map[string]float64) float64 {
	var sum float64
	for s, v := range old.Share() {
		sum += max(0, v-want[s])
	}
	return sum
}

// checkRebalance holds a plan to the bounds of a rebalance: the token-level
// invariant (checkPlan: each moved range has one source and one target, no
// overlap), the least movement, every shard at its weighted share, and no
// shard both giving and receiving, so that no range passes through a shard.
func checkRebalance(t *testing.T, what string, old *Ring, tg Target, next *Ring, moves []Move, rnd *rand.Rand) {
	t.Helper()
	checkPlan(t, old, next, moves, rnd)
	want := wanted(old, tg)
	if got, least := MovedFraction(moves), leastMovement(old, want); math.Abs(got-least) > 1e-6 {
		t.Fatalf("%s: moved %.9f of the space, the least possible is %.9f", what, got, least)
	}
	share := next.Share()
	if len(share) != len(want) {
		t.Fatalf("%s: shards after %v, want %v", what, next.Shards(), want)
	}
	for s, w := range want {
		if math.Abs(share[s]-w) > 1e-6 {
			t.Fatalf("%s: %s holds %.9f, its weighted share is %.9f", what, s, share[s], w)
		}
	}
	weights := map[string]float64{}
	for _, s := range next.Shards() {
		weights[s] = next.Spec(s).weight()
	}
	if mom := maxOverMean(share, weights); mom > 1.05 {
		t.Fatalf("%s: max/mean %.4f > 1.05", what, mom)
	}
	gives, gets := map[string]bool{}, map[string]bool{}
	for _, m := range moves {
		gives[m.From], gets[m.To] = true, true
	}
	for s := range gives {
		if gets[s] {
			t.Fatalf("%s: %s both gives and receives ranges", what, s)
		}
	}
}

func shardNames(ss []Shard) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}

// TestPlanRebalanceAddMany: adding K shards to N balanced ones moves
// K/(N+K) of the space, only from old shards to new ones, and leaves every
// shard at its share; four add-nodes one after another move more.
func TestPlanRebalanceAddMany(t *testing.T) {
	rnd := rand.New(rand.NewPCG(21, 22))
	o := Options{VNodes: 16}
	for _, c := range []struct{ n, k int }{{1, 1}, {2, 3}, {4, 1}, {4, 2}, {4, 4}, {5, 7}, {8, 8}, {16, 48}, {3, 30}} {
		old := mustBuild(t, names("s", c.n), o)
		tg := Target{Add: names("new", c.k)}
		next, moves, err := PlanRebalance(old, tg, o)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%d → %d", c.n, c.n+c.k)
		checkRebalance(t, what, old, tg, next, moves, rnd)
		ideal := float64(c.k) / float64(c.n+c.k)
		if got := MovedFraction(moves); math.Abs(got-ideal) > 0.01 {
			t.Errorf("%s: moved %.4f, want %.4f ± 0.01", what, got, ideal)
		}
		for _, m := range moves {
			if !strings.HasPrefix(m.From, "s") || !strings.HasPrefix(m.To, "new") {
				t.Fatalf("%s: move %v is not from an old shard to a new one", what, m)
			}
		}
		// Every new shard gets ranges all around the ring: about its vnode count.
		count := map[string]int{}
		for _, v := range next.VNodes() {
			count[v.Shard]++
		}
		for _, s := range tg.Add {
			if count[s.Name] < 8 {
				t.Errorf("%s: %s has %d vnodes, want about 16", what, s.Name, count[s.Name])
			}
		}
		steps, err := PlanSteps(old, tg, o)
		if err != nil {
			t.Fatal(err)
		}
		var seq float64
		for _, st := range steps {
			seq += MovedFraction(st)
		}
		// One at a time: 1/(N+1) + 1/(N+2) + ... + 1/(N+K) (each add-node is ideal).
		var harmonic float64
		for i := c.n + 1; i <= c.n+c.k; i++ {
			harmonic += 1 / float64(i)
		}
		if len(steps) != c.k || math.Abs(seq-harmonic) > 0.01 {
			t.Errorf("%s one at a time: %d steps moving %.4f, want %d moving %.4f", what, len(steps), seq, c.k, harmonic)
		}
		if c.k > 1 && seq <= MovedFraction(moves)+0.01 {
			t.Errorf("%s: one plan moves %.4f, one at a time %.4f", what, MovedFraction(moves), seq)
		}
	}
}

// TestPlanRebalanceFourToEight pins the figures: 0.500 against 0.634,
// one (source, target) pair per source.
func TestPlanRebalanceFourToEight(t *testing.T) {
	o := Options{VNodes: 16}
	old := mustBuild(t, []Shard{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}, o)
	tg := Target{Add: []Shard{{Name: "e"}, {Name: "f"}, {Name: "g"}, {Name: "h"}}}
	_, moves, err := PlanRebalance(old, tg, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := MovedFraction(moves); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("4 → 8 moved %.6f, want 0.5", got)
	}
	pairs := map[string]bool{}
	for _, m := range moves {
		pairs[m.From+"→"+m.To] = true
	}
	if len(pairs) != 4 {
		t.Errorf("4 → 8 in %d (source, target) pairs, want 4: %v", len(pairs), pairs)
	}
	steps, err := PlanSteps(old, tg, o)
	if err != nil {
		t.Fatal(err)
	}
	var seq float64
	for _, st := range steps {
		seq += MovedFraction(st)
	}
	if math.Abs(seq-0.6345) > 0.001 { // 1/5 + 1/6 + 1/7 + 1/8
		t.Errorf("four add-nodes moved %.4f, want 0.6345", seq)
	}
}

// TestPlanRebalanceRandom: many random clusters (weights, vnode counts, rings
// left uneven by earlier manual moves) and random changes (add, remove and
// reweigh at once), each plan held to the bounds.
func TestPlanRebalanceRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(23, 24))
	for iter := 0; iter < 300; iter++ {
		o := Options{VNodes: 1 + rnd.IntN(32)}
		var specs []Shard
		for i := 0; i < 1+rnd.IntN(12); i++ {
			specs = append(specs, Shard{Name: fmt.Sprintf("s%02d", i), Weight: float64(1 + rnd.IntN(3))})
		}
		old := mustBuild(t, specs, o)
		if rnd.IntN(3) == 0 { // an uneven ring: a manual move happened
			a, b := int64(rnd.Uint64()), int64(rnd.Uint64())
			if a > b {
				a, b = b, a
			}
			if a < b {
				moved, _, err := PlanMove(old, Range{a, b}, specs[rnd.IntN(len(specs))].Name)
				if err != nil {
					t.Fatal(err)
				}
				old = moved
			}
		}
		var tg Target
		for i := 0; i < rnd.IntN(6); i++ {
			tg.Add = append(tg.Add, Shard{Name: fmt.Sprintf("n%02d", i), Weight: float64(rnd.IntN(4))})
		}
		for _, s := range old.Shards() {
			switch rnd.IntN(6) {
			case 0:
				if len(tg.Remove) < len(old.Shards())-1 || len(tg.Add) > 0 {
					tg.Remove = append(tg.Remove, s)
				}
			case 1:
				tg.Weights = append(tg.Weights, Shard{Name: s, Weight: 0.5 + float64(rnd.IntN(6))/2})
			}
		}
		if len(tg.Remove) == len(old.Shards()) && len(tg.Add) == 0 {
			continue
		}
		next, moves, err := PlanRebalance(old, tg, o)
		if err != nil {
			t.Fatalf("iter %d: %s: %v", iter, tg, err)
		}
		what := fmt.Sprintf("iter %d (%d shards, %d vnodes per weight): %s", iter, len(old.Shards()), o.VNodes, tg)
		checkRebalance(t, what, old, tg, next, moves, rnd)
		for _, s := range tg.Remove {
			if next.HasShard(s) {
				t.Fatalf("%s: removed %s still owns ranges", what, s)
			}
		}
		for _, s := range shardNames(tg.Add) {
			if !next.HasShard(s) {
				t.Fatalf("%s: added %s owns nothing", what, s)
			}
		}
		// The plan is a function of its inputs: a migration computes it once
		// and stores it, and must get the same plan if it computes it again.
		again, moves2, err := PlanRebalance(old, tg, o)
		if err != nil || !slices.Equal(again.VNodes(), next.VNodes()) || !slices.Equal(moves, moves2) {
			t.Fatalf("%s: a second plan differs", what)
		}
	}
}

// TestPlanRebalanceRemoveMany removes several shards at once: exactly their
// shares move, only from them.
func TestPlanRebalanceRemoveMany(t *testing.T) {
	rnd := rand.New(rand.NewPCG(25, 26))
	for _, mode := range []Allocation{AllocBalanced, AllocHash} {
		o := Options{VNodes: 16, Tokens: mode}
		old := mustBuild(t, names("s", 8), o)
		tg := Target{Remove: []string{"s1", "s4", "s6"}}
		next, moves, err := PlanRebalance(old, tg, o)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, old, next, moves, rnd)
		share := old.Share()
		want := share["s1"] + share["s4"] + share["s6"]
		if got := MovedFraction(moves); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: moved %.6f, want the removed shares %.6f", mode, got, want)
		}
		for _, m := range moves {
			if !slices.Contains(tg.Remove, m.From) {
				t.Fatalf("%s: move %v not from a removed shard", mode, m)
			}
		}
		if mode == AllocBalanced {
			checkRebalance(t, "remove 3 of 8", old, tg, next, moves, rnd)
		}
	}
}

// TestPlanRebalanceHash: the classic ring, several shards at once.
func TestPlanRebalanceHash(t *testing.T) {
	rnd := rand.New(rand.NewPCG(27, 28))
	o := Options{VNodes: 256, Tokens: AllocHash}
	old := mustBuild(t, names("shard-", 4), o)
	tg := Target{Add: names("new-", 4), Remove: []string{"shard-2"}}
	next, moves, err := PlanRebalance(old, tg, o)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, old, next, moves, rnd)
	if next.HasShard("shard-2") || next.Len() != 3*256+4*256 {
		t.Fatalf("hash rebalance: %v, %d vnodes", next.Shards(), next.Len())
	}
	// Every token the new shards' hash tokens did not take stays, except
	// the removed shard's: its ranges go to the next token clockwise.
	if got := MovedFraction(moves); math.Abs(got-(4.0/7+1.0/4*3/7)) > 0.05 {
		t.Errorf("hash rebalance moved %.4f, want about %.4f", got, 4.0/7+1.0/4*3/7)
	}
	if _, _, err := PlanRebalance(old, Target{Weights: []Shard{{Name: "shard-1", Weight: 2}}}, o); err == nil || !strings.Contains(err.Error(), "balanced") {
		t.Errorf("new weights with hash tokens: %v", err)
	}
}

// TestPlanRebalanceAmong: Among confines a change; a split is its special
// case, and a removal among two shards gives everything to the other.
func TestPlanRebalanceAmong(t *testing.T) {
	rnd := rand.New(rand.NewPCG(29, 30))
	o := Options{VNodes: 16}
	old := mustBuild(t, names("s", 4), o)
	next, moves, err := PlanRebalance(old, Target{Add: []Shard{{Name: "x"}, {Name: "y"}}, Among: []string{"s1"}}, o)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, old, next, moves, rnd)
	sh := next.Share()
	for _, s := range []string{"s1", "x", "y"} {
		if math.Abs(sh[s]-0.25/3) > 1e-9 {
			t.Errorf("split of s1 in three: %s holds %.6f", s, sh[s])
		}
	}
	for _, m := range moves {
		if m.From != "s1" {
			t.Fatalf("move %v not from s1", m)
		}
	}
	next, moves, err = PlanRebalance(old, Target{Remove: []string{"s2"}, Among: []string{"s3"}}, o)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, old, next, moves, rnd)
	if sh := next.Share(); math.Abs(sh["s3"]-0.5) > 1e-9 || math.Abs(sh["s0"]-0.25) > 1e-12 {
		t.Errorf("s2 removed among s3: shares %v", sh)
	}
}

func TestPlanRebalanceRejects(t *testing.T) {
	old := mustBuild(t, names("s", 3), Options{})
	before := old.VNodes()
	for _, c := range []struct {
		t    Target
		want string
	}{
		{Target{Remove: []string{"zz"}}, "remove zz: no such shard"},
		{Target{Remove: []string{"s1", "s1"}}, "listed twice"},
		{Target{Remove: []string{"s0", "s1", "s2"}}, "every shard"},
		{Target{Add: []Shard{{Name: "s1"}}}, "already has a shard s1"},
		{Target{Add: []Shard{{Name: "n"}, {Name: "n"}}}, "add n: listed twice"},
		{Target{Add: []Shard{{Name: ""}}}, "empty name"},
		{Target{Add: []Shard{{Name: "n", Weight: -1}}}, "weight -1"},
		{Target{Weights: []Shard{{Name: "zz", Weight: 2}}}, "weight of zz: no such shard"},
		{Target{Weights: []Shard{{Name: "s1", Weight: 2}}, Remove: []string{"s1"}}, "is removed"},
		{Target{Weights: []Shard{{Name: "s1", Weight: 2}, {Name: "s1", Weight: 3}}}, "given twice"},
		{Target{Weights: []Shard{{Name: "s1", Weight: 2}}, Among: []string{"s0"}}, "not among"},
		{Target{Among: []string{"zz"}}, "among zz"},
		{Target{Remove: []string{"s0"}, Among: []string{"s0"}}, "every one of them is removed"},
	} {
		_, _, err := PlanRebalance(old, c.t, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("PlanRebalance(%s) = %v, want an error mentioning %q", c.t, err, c.want)
		}
	}
	if !slices.Equal(old.VNodes(), before) {
		t.Fatal("a refused plan changed the ring")
	}
	// Nothing to do: a balanced ring rebalanced to the same weights.
	next, moves, err := PlanRebalance(old, Target{}, Options{})
	if err != nil || len(moves) != 0 || !slices.Equal(next.VNodes(), before) {
		t.Fatalf("empty rebalance of a balanced ring: %d moves, %v", len(moves), err)
	}
}

// Planning 1,000 shards × 256 vnodes to 1,064 in one plan.
func BenchmarkPlanRebalance1000x256Add64(b *testing.B) {
	o := Options{VNodes: 256}
	r, err := Build(names("shard-", 1000), o)
	if err != nil {
		b.Fatal(err)
	}
	add := names("new-", 64)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := PlanRebalance(r, Target{Add: add}, o); err != nil {
			b.Fatal(err)
		}
	}
}

// TestPlanChangeRebalance: the migration's one planner takes a rebalance,
// with the registry's weights and the change's new ones.
func TestPlanChangeRebalance(t *testing.T) {
	o := Options{VNodes: 16}
	old := mustBuild(t, names("s", 4), o)
	reg := []Shard{{Name: "s0", Weight: 1}, {Name: "s1", Weight: 1}, {Name: "s2", Weight: 1}, {Name: "s3", Weight: 1}}
	c := Change{Kind: "rebalance", Add: []string{"e", "f"}, Remove: []string{"s3"}, Weights: map[string]float64{"e": 2, "s0": 2}, Opts: o}
	next, moves, err := PlanChange(old, reg, c)
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, old, next, moves, rand.New(rand.NewPCG(31, 32)))
	// Weights s0 2, s1 1, s2 1, e 2, f 1: total 7.
	sh := next.Share()
	for s, w := range map[string]float64{"s0": 2, "s1": 1, "s2": 1, "e": 2, "f": 1} {
		if math.Abs(sh[s]-w/7) > 1e-9 {
			t.Errorf("%s holds %.6f, want %.6f", s, sh[s], w/7)
		}
	}
	if next.HasShard("s3") {
		t.Error("s3 still in the ring")
	}
	again, moves2, err := PlanChange(old, reg, c)
	if err != nil || !slices.Equal(moves, moves2) || !slices.Equal(again.VNodes(), next.VNodes()) {
		t.Fatal("the same change planned twice differs")
	}
	if _, _, err := PlanChange(old, reg, Change{Kind: "rebalance", Remove: []string{"zz"}, Opts: o}); err == nil || !strings.Contains(err.Error(), "rebalance: remove zz") {
		t.Errorf("unknown shard: %v", err)
	}
}
