package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkOverlay: every probed token is owned as in new inside cut and as in
// old outside it.
func checkOverlay(t *testing.T, got, old, new *Ring, cut []Range, rnd *rand.Rand) {
	t.Helper()
	probe := []int64{MinToken, MinToken + 1, -1, 0, 1, MaxToken - 1, MaxToken}
	for _, r := range []*Ring{old, new, got} {
		for _, tok := range r.tokens {
			probe = append(probe, tok, tok+1, tok-1)
		}
	}
	for _, c := range cut {
		probe = append(probe, c.Lo, c.Lo+1, c.Hi, c.Hi+1)
	}
	for i := 0; i < 500; i++ {
		probe = append(probe, int64(rnd.Uint64()))
	}
	for _, tok := range probe {
		want := old.Owner(tok)
		if ContainsAny(cut, tok) {
			want = new.Owner(tok)
		}
		if g := got.Owner(tok); g != want {
			t.Fatalf("token %d: overlay owner %s, want %s (cut %v)", tok, g, want, cut)
		}
	}
}

func checkKeeps(t *testing.T, got, new *Ring) {
	t.Helper()
	for _, tok := range new.tokens {
		if _, ok := slices.BinarySearch(got.tokens, tok); !ok {
			t.Fatalf("overlay lost the token %d of the ring it takes owners from", tok)
		}
	}
}

// TestOverlayMigration cuts over the moves of random plans one at a time, in
// random order, then rolls them back one at a time: every intermediate ring
// gives each range to the right owner, all cut over is exactly the new ring,
// all rolled back exactly the old one.
func TestOverlayMigration(t *testing.T) {
	rnd := rand.New(rand.NewPCG(21, 22))
	for iter := 0; iter < 60; iter++ {
		mode := []Allocation{AllocBalanced, AllocHash}[iter%2]
		o := Options{VNodes: 1 + rnd.IntN(16), Tokens: mode}
		old := mustBuild(t, names("s", 1+rnd.IntN(5)), o)
		var next *Ring
		var moves []Move
		var err error
		switch iter % 3 {
		case 0:
			next, moves, err = PlanAddNode(old, Shard{Name: "new"}, o)
		case 1:
			if len(old.Shards()) == 1 {
				next, moves, err = PlanAddNode(old, Shard{Name: "new"}, o)
			} else {
				next, moves, err = PlanRemoveNode(old, old.Shards()[0], o)
			}
		case 2:
			a, b := int64(rnd.Uint64()), int64(rnd.Uint64())
			if a > b {
				a, b = b, a
			}
			next, moves, err = PlanMove(old, Range{a, b}, "new")
		}
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		cur, err := Overlay(old, next, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkOverlay(t, cur, old, next, nil, rnd)
		checkKeeps(t, cur, next)
		var cut []Range
		for _, i := range rnd.Perm(len(moves)) {
			if cur, err = Overlay(cur, next, []Range{moves[i].Range}); err != nil {
				t.Fatal(err)
			}
			cut = append(cut, moves[i].Range)
			checkOverlay(t, cur, old, next, cut, rnd)
			checkKeeps(t, cur, next)
		}
		if !slices.Equal(cur.VNodes(), next.VNodes()) {
			t.Fatalf("iter %d: all cut over: %d vnodes, want new's %d", iter, cur.Len(), next.Len())
		}
		for _, i := range rnd.Perm(len(moves)) {
			if cur, err = Overlay(cur, old, []Range{moves[i].Range}); err != nil {
				t.Fatal(err)
			}
			cut = slices.DeleteFunc(cut, func(r Range) bool { return r == moves[i].Range })
			checkOverlay(t, cur, old, next, cut, rnd)
			checkKeeps(t, cur, old)
		}
		if !slices.Equal(cur.VNodes(), old.VNodes()) {
			t.Fatalf("iter %d: all rolled back: %v, want old's %v", iter, cur, old)
		}
	}
}

// TestOverlayArbitraryRanges: ranges not aligned to any vnode, touching
// MinToken and MaxToken, split the owners exactly at their bounds.
func TestOverlayArbitraryRanges(t *testing.T) {
	rnd := rand.New(rand.NewPCG(23, 24))
	a := MustNew([]VNode{{Token: -100, Shard: "a"}, {Token: 100, Shard: "b"}})
	b := MustNew([]VNode{{Token: 0, Shard: "c"}})
	for _, cut := range [][]Range{
		{{MinToken, -200}},
		{{50, MaxToken}},
		{{MinToken, -200}, {50, MaxToken}},
		{{-100, 100}},
		{{-5, 5}},
		{{MinToken, MaxToken}},
	} {
		got, err := Overlay(a, b, cut)
		if err != nil {
			t.Fatal(err)
		}
		checkOverlay(t, got, a, b, cut, rnd)
		checkKeeps(t, got, b)
	}
	for i := 0; i < 300; i++ {
		old := mustBuild(t, names("o", 1+rnd.IntN(4)), Options{VNodes: 1 + rnd.IntN(8), Tokens: AllocHash})
		nw := mustBuild(t, names("n", 1+rnd.IntN(4)), Options{VNodes: 1 + rnd.IntN(8), Tokens: AllocHash})
		var cut []Range
		for j := rnd.IntN(4); j > 0; j-- {
			x, y := int64(rnd.Uint64()), int64(rnd.Uint64())
			switch rnd.IntN(4) {
			case 0:
				x = MinToken
			case 1:
				y = MaxToken
			}
			if x > y {
				x, y = y, x
			}
			if x < y {
				cut = append(cut, Range{x, y})
			}
		}
		got, err := Overlay(old, nw, cut)
		if err != nil {
			t.Fatal(fmt.Errorf("cut %v: %w", cut, err))
		}
		checkOverlay(t, got, old, nw, Normalize(cut), rnd)
		checkKeeps(t, got, nw)
	}
}
