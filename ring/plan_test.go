package ring

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func names(prefix string, n int) []Shard {
	out := make([]Shard, n)
	for i := range out {
		out[i] = Shard{Name: fmt.Sprintf("%s%d", prefix, i)}
	}
	return out
}

func mustBuild(t testing.TB, shards []Shard, o Options) *Ring {
	t.Helper()
	r, err := Build(shards, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkPlan verifies a plan against the invariant of DESIGN.md §1: a token
// outside the moves keeps its owner, a token inside a move goes from its From
// to its To. Probes are every token of both rings, their neighbours, the
// edges of the space and random tokens.
func checkPlan(t *testing.T, old, next *Ring, moves []Move, rnd *rand.Rand) {
	t.Helper()
	for i, m := range moves {
		if !m.Range.Valid() || m.From == m.To {
			t.Fatalf("bad move %v", m)
		}
		if i > 0 && moves[i-1].Range.Hi > m.Range.Lo {
			t.Fatalf("moves overlap or are out of order: %v then %v", moves[i-1], m)
		}
		if i > 0 && moves[i-1].Range.Hi == m.Range.Lo && moves[i-1].From == m.From && moves[i-1].To == m.To {
			t.Fatalf("adjacent moves not merged: %v then %v", moves[i-1], m)
		}
	}
	probe := []int64{MinToken, MinToken + 1, -1, 0, 1, MaxToken - 1, MaxToken}
	for _, r := range []*Ring{old, next} {
		for _, tok := range r.tokens {
			probe = append(probe, tok, tok+1, tok-1)
		}
	}
	for i := 0; i < 2000; i++ {
		probe = append(probe, int64(rnd.Uint64()))
	}
	for _, tok := range probe {
		var in *Move
		for i := range moves {
			if moves[i].Range.Contains(tok) {
				if in != nil {
					t.Fatalf("token %d in two moves", tok)
				}
				in = &moves[i]
			}
		}
		from, to := old.Owner(tok), next.Owner(tok)
		switch {
		case in == nil && from != to:
			t.Fatalf("token %d outside every move changed owner %s → %s", tok, from, to)
		case in != nil && (from != in.From || to != in.To):
			t.Fatalf("token %d in move %v but owners %s → %s", tok, *in, from, to)
		}
	}
}

func maxOverMean(share map[string]float64, weights map[string]float64) float64 {
	var tw float64
	for s := range share {
		tw += weights[s]
	}
	worst := 0.0
	for s, v := range share {
		worst = max(worst, v/(weights[s]/tw))
	}
	return worst
}

func ones(r *Ring) map[string]float64 {
	w := map[string]float64{}
	for _, s := range r.Shards() {
		w[s] = r.Spec(s).weight()
	}
	return w
}

func TestBuildBalanced(t *testing.T) {
	r := mustBuild(t, names("s", 4), Options{VNodes: 16})
	if r.Len() != 64 {
		t.Fatalf("%d vnodes", r.Len())
	}
	for s, v := range r.Share() {
		if math.Abs(v-0.25) > 1e-12 {
			t.Errorf("share of %s = %v", s, v)
		}
	}
	vs := r.VNodes()
	for i := range vs {
		if vs[i].Shard == vs[(i+1)%len(vs)].Shard {
			t.Fatalf("neighbours %v and %v share a shard: not interleaved", vs[i], vs[(i+1)%len(vs)])
		}
	}
	if vs[len(vs)-1].Token != MaxToken {
		t.Errorf("last even token %d, want MaxToken", vs[len(vs)-1].Token)
	}
	// Weights: b has twice the space of a and c.
	w := mustBuild(t, []Shard{{Name: "a"}, {Name: "b", Weight: 2}, {Name: "c"}}, Options{VNodes: 8})
	sh := w.Share()
	if math.Abs(sh["b"]-0.5) > 1e-9 || math.Abs(sh["a"]-0.25) > 1e-9 {
		t.Errorf("weighted shares %v", sh)
	}
}

func TestBuildRejects(t *testing.T) {
	for _, c := range [][]Shard{nil, {{Name: ""}}, {{Name: "a"}, {Name: "a"}}, {{Name: "a", Weight: -1}}} {
		if _, err := Build(c, Options{}); err == nil {
			t.Errorf("Build(%v) accepted", c)
		}
	}
	if _, err := Build(names("s", 2), Options{Tokens: "random"}); err == nil {
		t.Error("Build accepted an unknown allocation")
	}
}

func TestBuildHashIsClassicRing(t *testing.T) {
	r := mustBuild(t, names("s", 3), Options{VNodes: 4, Tokens: AllocHash})
	for _, v := range r.VNodes() {
		found := false
		for i := 0; i < 4; i++ {
			if TokenText(fmt.Sprintf("%s#%d", v.Shard, i)) == v.Token {
				found = true
			}
		}
		if !found {
			t.Errorf("vnode %v is not at the token of <shard>#<i>", v)
		}
	}
	// Weighted hash ring: vnode counts follow weights.
	w := mustBuild(t, []Shard{{Name: "a"}, {Name: "b", Weight: 3}}, Options{VNodes: 256, Tokens: AllocHash})
	n := map[string]int{}
	for _, v := range w.VNodes() {
		n[v.Shard]++
	}
	if n["a"] != 256 || n["b"] != 768 {
		t.Errorf("vnode counts %v", n)
	}
	if sh := w.Share()["b"]; sh < 0.70 || sh > 0.80 {
		t.Errorf("weight-3 shard holds %v of the space, want ≈0.75", sh)
	}
}

func TestPlanAddNodeBalanced(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 6))
	r := mustBuild(t, names("s", 4), Options{VNodes: 16})
	// Add shards one by one from 4 to 12: every step moves ≈1/(N+1) and the
	// ring stays balanced.
	for n := 4; n < 12; n++ {
		next, moves, err := PlanAddNode(r, Shard{Name: fmt.Sprintf("s%d", n)}, Options{VNodes: 16})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, r, next, moves, rnd)
		ideal := 1 / float64(n+1)
		if got := MovedFraction(moves); math.Abs(got-ideal) > 0.01 {
			t.Errorf("add to %d shards moved %.4f, ideal %.4f", n, got, ideal)
		}
		if mom := maxOverMean(next.Share(), ones(next)); mom > 1.05 {
			t.Errorf("after adding shard %d: max/mean share %.4f > 1.05", n, mom)
		}
		// Taken from every shard, evenly.
		from := map[string]float64{}
		for _, m := range moves {
			if m.To != fmt.Sprintf("s%d", n) {
				t.Fatalf("move %v not to the new shard", m)
			}
			from[m.From] += m.Range.Width() / twoTo64
		}
		if len(from) != n {
			t.Errorf("add to %d shards took from only %d", n, len(from))
		}
		r = next
	}
}

func TestPlanAddNodeWeighted(t *testing.T) {
	r := mustBuild(t, names("s", 3), Options{VNodes: 16})
	next, moves, err := PlanAddNode(r, Shard{Name: "big", Weight: 3}, Options{VNodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, r, next, moves, rand.New(rand.NewPCG(1, 1)))
	if got := next.Share()["big"]; math.Abs(got-0.5) > 0.01 {
		t.Errorf("weight-3 shard added to three weight-1 shards holds %.4f, want 0.5", got)
	}
	if mom := maxOverMean(next.Share(), ones(next)); mom > 1.05 {
		t.Errorf("weighted max/mean %.4f", mom)
	}
}

func TestPlanAddNodeHash(t *testing.T) {
	r := mustBuild(t, names("shard-", 4), Options{VNodes: 256, Tokens: AllocHash})
	next, moves, err := PlanAddNode(r, Shard{Name: "shard-4"}, Options{VNodes: 256, Tokens: AllocHash})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, r, next, moves, rand.New(rand.NewPCG(2, 2)))
	if got := MovedFraction(moves); math.Abs(got-0.2) > 0.03 {
		t.Errorf("hash ring, 256 vnodes: moved %.4f, want 0.20 ± 0.03", got)
	}
	// The classic ring: exactly the new shard's own hash tokens were added.
	if next.Len() != r.Len()+256 {
		t.Errorf("%d vnodes after add, want %d", next.Len(), r.Len()+256)
	}
}

func TestPlanAddNodeRejects(t *testing.T) {
	r := mustBuild(t, names("s", 2), Options{})
	if _, _, err := PlanAddNode(r, Shard{Name: "s1"}, Options{}); err == nil {
		t.Error("added an existing shard")
	}
	if _, _, err := PlanAddNode(r, Shard{Name: ""}, Options{}); err == nil {
		t.Error("added a shard without a name")
	}
}

func TestPlanSplit(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	for _, mode := range []Allocation{AllocBalanced, AllocHash} {
		r := mustBuild(t, names("s", 4), Options{VNodes: 16, Tokens: mode})
		before := r.Share()["s2"]
		next, moves, err := PlanSplit(r, "s2", Shard{Name: "s2b"}, Options{VNodes: 16, Tokens: mode})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, r, next, moves, rnd)
		for _, m := range moves {
			if m.From != "s2" || m.To != "s2b" {
				t.Fatalf("%s split moved %v", mode, m)
			}
		}
		if got := MovedFraction(moves); math.Abs(got-before/2) > 1e-9 {
			t.Errorf("%s split moved %.6f of the space, want half of s2's %.6f", mode, got, before)
		}
	}
	r := mustBuild(t, names("s", 2), Options{})
	if _, _, err := PlanSplit(r, "nope", Shard{Name: "x"}, Options{}); err == nil {
		t.Error("split of an unknown shard")
	}
	if _, _, err := PlanSplit(r, "s0", Shard{Name: "s1"}, Options{}); err == nil {
		t.Error("split into an existing shard")
	}
}

func TestPlanRemoveNode(t *testing.T) {
	rnd := rand.New(rand.NewPCG(9, 10))
	for _, mode := range []Allocation{AllocBalanced, AllocHash} {
		o := Options{VNodes: 16, Tokens: mode}
		r := mustBuild(t, names("s", 5), o)
		share := r.Share()["s3"]
		next, moves, err := PlanRemoveNode(r, "s3", o)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, r, next, moves, rnd)
		if next.HasShard("s3") {
			t.Fatalf("%s: s3 still in the ring", mode)
		}
		if got := MovedFraction(moves); math.Abs(got-share) > 1e-9 {
			t.Errorf("%s: removing s3 moved %.6f, want its share %.6f", mode, got, share)
		}
		for _, m := range moves {
			if m.From != "s3" {
				t.Fatalf("%s: move %v not from the removed shard", mode, m)
			}
		}
		if mode == AllocBalanced {
			if mom := maxOverMean(next.Share(), ones(next)); mom > 1.05 {
				t.Errorf("balanced remove: max/mean %.4f", mom)
			}
		}
	}
	r := mustBuild(t, names("s", 1), Options{})
	if _, _, err := PlanRemoveNode(r, "s0", Options{}); err == nil {
		t.Error("removed the last shard")
	}
	if _, _, err := PlanRemoveNode(r, "zz", Options{}); err == nil {
		t.Error("removed an unknown shard")
	}
}

func TestPlanMove(t *testing.T) {
	rnd := rand.New(rand.NewPCG(11, 12))
	for _, mode := range []Allocation{AllocBalanced, AllocHash} { // with and without a token at MaxToken
		testPlanMove(t, rnd, mustBuild(t, names("s", 3), Options{VNodes: 4, Tokens: mode}))
	}
}

func testPlanMove(t *testing.T, rnd *rand.Rand, r *Ring) {
	vs := r.VNodes()
	cases := []Range{
		{-1000, 1000},
		{MinToken, -5},                 // the wrap's low half, including MinToken
		{5, MaxToken},                  // the wrap's high half
		{MinToken, MaxToken},           // everything
		{vs[2].Token, vs[5].Token},     // exactly some vnodes
		{vs[3].Token - 1, vs[3].Token}, // one token, a vnode token
		{vs[0].Token, vs[0].Token + 1},
	}
	for _, rg := range cases {
		for _, to := range []string{"s1", "new"} {
			next, moves, err := PlanMove(r, rg, to)
			if err != nil {
				t.Fatalf("move %v: %v", rg, err)
			}
			checkPlan(t, r, next, moves, rnd)
			// Exactly rg changed hands, minus what to already owned.
			var want float64
			for _, or := range r.AllRanges() {
				if or.Shard == to {
					continue
				}
				lo, hi := max(or.Range.Lo, rg.Lo), min(or.Range.Hi, rg.Hi)
				if lo < hi {
					want += Range{lo, hi}.Width()
				}
				if or.Range.Lo == MinToken && rg.Lo == MinToken && lo == hi && lo == MinToken {
					want++ // the single token MinToken
				}
			}
			if got := MovedFraction(moves) * twoTo64; math.Abs(got-want) > want*1e-12+1 {
				t.Errorf("move %v to %s moved %v tokens, want %v", rg, to, got, want)
			}
			for _, m := range moves {
				if m.To != to {
					t.Errorf("move %v to %s produced %v", rg, to, m)
				}
			}
		}
	}
	if _, _, err := PlanMove(r, Range{5, 5}, "s1"); err == nil {
		t.Error("moved an empty range")
	}
}

// TestPlansRandom runs random sequences of plans over random rings and checks
// the invariant at every step.
func TestPlansRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(13, 14))
	for iter := 0; iter < 30; iter++ {
		mode := []Allocation{AllocBalanced, AllocHash}[iter%2]
		o := Options{VNodes: 1 + rnd.IntN(20), Tokens: mode}
		r := mustBuild(t, names("s", 1+rnd.IntN(6)), o)
		next := 100
		for step := 0; step < 8; step++ {
			var nr *Ring
			var moves []Move
			var err error
			shards := r.Shards()
			victim := shards[rnd.IntN(len(shards))]
			switch rnd.IntN(4) {
			case 0:
				nr, moves, err = PlanAddNode(r, Shard{Name: fmt.Sprintf("s%d", next), Weight: float64(1 + rnd.IntN(3))}, o)
				next++
			case 1:
				nr, moves, err = PlanSplit(r, victim, Shard{Name: fmt.Sprintf("s%d", next)}, o)
				next++
			case 2:
				if len(shards) == 1 {
					continue
				}
				nr, moves, err = PlanRemoveNode(r, victim, o)
			case 3:
				a, b := int64(rnd.Uint64()), int64(rnd.Uint64())
				if a > b {
					a, b = b, a
				}
				if a == b {
					continue
				}
				nr, moves, err = PlanMove(r, Range{a, b}, victim)
			}
			if err != nil {
				t.Fatalf("iter %d step %d: %v", iter, step, err)
			}
			checkPlan(t, r, nr, moves, rnd)
			r = nr
		}
	}
}

func TestMoveJSON(t *testing.T) {
	m := []Move{{Range{MinToken, -3}, "a", "e"}, {Range{7, MaxToken}, "b", "e"}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"lo":-9223372036854775808,"hi":-3,"from":"a","to":"e"},{"lo":7,"hi":9223372036854775807,"from":"b","to":"e"}]`
	if string(b) != want {
		t.Fatalf("Marshal = %s", b)
	}
	var back []Move
	if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back, m) {
		t.Fatalf("round trip %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"lo":5,"hi":5,"from":"a","to":"b"}`), &Move{}); err == nil {
		t.Error("accepted an empty move")
	}
}

func TestDiffWrapIsTwoMoves(t *testing.T) {
	old := MustNew([]VNode{{-100, "a"}, {100, "b"}})
	next := MustNew([]VNode{{-100, "c"}, {100, "b"}})
	got := Diff(old, next)
	want := []Move{{Range{MinToken, -100}, "a", "c"}, {Range{100, MaxToken}, "a", "c"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Diff = %v, want %v", got, want)
	}
	if d := Diff(old, old); len(d) != 0 {
		t.Fatalf("Diff of a ring with itself = %v", d)
	}
}

func TestReplicas(t *testing.T) {
	r := MustNew([]VNode{{10, "a"}, {20, "a"}, {30, "b"}, {40, "c"}, {50, "d"}})
	if got := r.Replicas(15, 3); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Replicas = %v", got)
	}
	if got := r.Replicas(45, 9); !slices.Equal(got, []string{"d", "a", "b", "c"}) {
		t.Errorf("Replicas wrap = %v", got)
	}
	// a and b share a zone: after a, skip b until every zone is used.
	rd, err := r.WithShards([]Shard{{Name: "a", Domain: "z1"}, {Name: "b", Domain: "z1"}, {Name: "c", Domain: "z2"}, {Name: "d", Domain: "z3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rd.Replicas(15, 3); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Errorf("Replicas with domains = %v", got)
	}
	if got := rd.Replicas(15, 4); !slices.Equal(got, []string{"a", "c", "d", "b"}) {
		t.Errorf("Replicas with domains, all = %v", got)
	}
	// Property: distinct shards, owner first, distinct domains while possible.
	rnd := rand.New(rand.NewPCG(15, 16))
	specs := []Shard{}
	for i := 0; i < 12; i++ {
		specs = append(specs, Shard{Name: fmt.Sprintf("s%d", i), Domain: fmt.Sprintf("z%d", i%4)})
	}
	big := mustBuild(t, specs, Options{VNodes: 8, Tokens: AllocHash})
	for i := 0; i < 500; i++ {
		tok := int64(rnd.Uint64())
		got := big.Replicas(tok, 3)
		if len(got) != 3 || got[0] != big.Owner(tok) {
			t.Fatalf("Replicas(%d) = %v, owner %s", tok, got, big.Owner(tok))
		}
		zones := map[string]bool{}
		for _, s := range got {
			zones[big.Spec(s).Domain] = true
		}
		if len(zones) != 3 {
			t.Fatalf("Replicas(%d) = %v share a zone", tok, got)
		}
	}
}

func benchPlan(b *testing.B, mode Allocation) {
	o := Options{VNodes: 256, Tokens: mode}
	r, err := Build(names("shard-", 1000), o)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, moves, err := PlanAddNode(r, Shard{Name: "new"}, o)
		if err != nil || len(moves) == 0 {
			b.Fatal(err)
		}
	}
}

// Planning on 1,000 shards × 256 vnodes: the target is < 100 ms per plan.
func BenchmarkPlanAddNode1000x256Balanced(b *testing.B) { benchPlan(b, AllocBalanced) }
func BenchmarkPlanAddNode1000x256Hash(b *testing.B)     { benchPlan(b, AllocHash) }

func BenchmarkPlanRemoveNode1000x256(b *testing.B) {
	o := Options{VNodes: 256}
	r, err := Build(names("shard-", 1000), o)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := PlanRemoveNode(r, "shard-7", o); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAddingChecks(t *testing.T) {
	r := MustNew([]VNode{{10, "a"}, {20, "b"}})
	for _, extra := range [][]VNode{
		{{10, "c"}},            // an existing token
		{{15, "c"}, {15, "c"}}, // twice
		{{MinToken, "c"}},
		{{15, "a"}}, // an existing shard
		nil,
	} {
		if _, err := r.adding(extra); err == nil {
			t.Errorf("adding(%v) accepted", extra)
		}
	}
	got, err := r.adding([]VNode{{30, "0"}, {5, "0"}})
	if err != nil {
		t.Fatal(err)
	}
	want := MustNew([]VNode{{5, "0"}, {10, "a"}, {20, "b"}, {30, "0"}})
	if !slices.Equal(got.VNodes(), want.VNodes()) || !slices.Equal(got.Shards(), want.Shards()) || got.Owner(25) != "0" || got.Owner(15) != "b" {
		t.Fatalf("adding = %v", got.VNodes())
	}
}

// CompareSteps: the steps' fractions add up; the ratio is the plan's over
// theirs, 0 when the steps move nothing.
func TestCompareSteps(t *testing.T) {
	half := Move{Range: Range{Lo: MinToken, Hi: -1}, From: "a", To: "b"}
	quarter := Move{Range: Range{Lo: -1, Hi: MaxToken / 2}, From: "a", To: "c"}
	seq, one, ratio := CompareSteps([]Move{half}, [][]Move{{half}, {quarter}})
	if math.Abs(seq-0.75) > 1e-9 || math.Abs(one-0.5) > 1e-9 || math.Abs(ratio-2.0/3) > 1e-9 {
		t.Errorf("seq %v one %v ratio %v, want 0.75 0.5 0.667", seq, one, ratio)
	}
	if _, _, ratio := CompareSteps([]Move{half}, nil); ratio != 0 {
		t.Errorf("no steps: ratio %v, want 0", ratio)
	}
}
