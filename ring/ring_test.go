package ring

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestNewRejects(t *testing.T) {
	for name, vs := range map[string][]VNode{
		"empty":      nil,
		"duplicate":  {{1, "a"}, {1, "b"}},
		"min token":  {{MinToken, "a"}, {5, "b"}},
		"no shard":   {{5, ""}},
		"dup 3 ways": {{7, "a"}, {3, "b"}, {7, "a"}},
	} {
		if _, err := New(vs); err == nil {
			t.Errorf("%s: New accepted %v", name, vs)
		}
	}
}

func TestOwnerEdges(t *testing.T) {
	r := MustNew([]VNode{{100, "b"}, {-100, "a"}, {MaxToken, "c"}})
	tests := []struct {
		tok  int64
		want string
	}{
		{MinToken, "a"}, // the wrap's low half [MinToken, first] belongs to the first vnode
		{-101, "a"},
		{-100, "a"}, // a vnode token belongs to its own vnode (hi inclusive)
		{-99, "b"},
		{100, "b"},
		{101, "c"},
		{MaxToken, "c"},
	}
	for _, tt := range tests {
		if got := r.Owner(tt.tok); got != tt.want {
			t.Errorf("Owner(%d) = %s, want %s", tt.tok, got, tt.want)
		}
	}
	// Without a vnode at MaxToken, (last, MaxToken] wraps to the first vnode.
	r2 := MustNew([]VNode{{-100, "a"}, {100, "b"}})
	for _, tok := range []int64{101, MaxToken, MinToken, -100} {
		if got := r2.Owner(tok); got != "a" {
			t.Errorf("wrap: Owner(%d) = %s, want a", tok, got)
		}
	}
	if got := r2.Ranges("a"); !slices.Equal(got, []Range{{MinToken, -100}, {100, MaxToken}}) {
		t.Errorf("Ranges(a) = %v", got)
	}
	if got := r2.Ranges("b"); !slices.Equal(got, []Range{{-100, 100}}) {
		t.Errorf("Ranges(b) = %v", got)
	}
	if r2.Ranges("zz") != nil {
		t.Error("unknown shard owns ranges")
	}
	one := MustNew([]VNode{{0, "solo"}})
	if got := one.Ranges("solo"); !slices.Equal(got, []Range{{MinToken, MaxToken}}) {
		t.Errorf("single vnode Ranges = %v", got)
	}
}

// TestRangesAgreeWithOwner: for random rings and tokens (and every vnode token
// and its neighbours), the shard whose Ranges contain a token is its Owner,
// and exactly one shard's ranges contain it.
func TestRangesAgreeWithOwner(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 50; iter++ {
		var vs []VNode
		seen := map[int64]bool{}
		n := 1 + rnd.IntN(40)
		for len(vs) < n {
			tok := int64(rnd.Uint64())
			if iter%3 == 0 { // clustered: many tokens share one index bucket
				tok = int64(rnd.IntN(100)) - 50
			}
			if rnd.IntN(10) == 0 {
				tok = MaxToken
			}
			if tok == MinToken || seen[tok] {
				continue
			}
			seen[tok] = true
			vs = append(vs, VNode{tok, fmt.Sprintf("s%d", rnd.IntN(5))})
		}
		r := MustNew(vs)
		ranges := map[string][]Range{}
		for _, s := range r.Shards() {
			ranges[s] = r.Ranges(s)
		}
		probe := []int64{MinToken, MaxToken, MinToken + 1, 0, MaxToken - 1}
		for _, v := range vs {
			probe = append(probe, v.Token, v.Token-1, v.Token+1)
		}
		for i := 0; i < 200; i++ {
			probe = append(probe, int64(rnd.Uint64()))
		}
		for _, tok := range probe {
			owner := r.Owner(tok)
			count := 0
			for s, rs := range ranges {
				if ContainsAny(rs, tok) {
					count++
					if s != owner {
						t.Fatalf("token %d: Owner %s but in ranges of %s (%v)", tok, owner, s, r.VNodes())
					}
				}
			}
			if count != 1 {
				t.Fatalf("token %d in ranges of %d shards", tok, count)
			}
		}
		var total float64
		for _, w := range r.Share() {
			total += w
		}
		if total < 0.999999 || total > 1.000001 {
			t.Fatalf("shares sum to %v", total)
		}
	}
}

func TestRingJSON(t *testing.T) {
	r := MustNew([]VNode{{5, "b"}, {-5, "a"}})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"vnodes":[{"token":-5,"shard":"a"},{"token":5,"shard":"b"}]}`; string(b) != want {
		t.Fatalf("Marshal = %s, want %s", b, want)
	}
	var back Ring
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.VNodes(), r.VNodes()) {
		t.Fatalf("round trip: %v", back.VNodes())
	}
	if err := json.Unmarshal([]byte(`{"vnodes":[{"token":1,"shard":"a"},{"token":1,"shard":"b"}]}`), &back); err == nil {
		t.Fatal("Unmarshal accepted duplicate tokens")
	}
}

func benchRing(shards, vnodes int) *Ring {
	vs := make([]VNode, 0, shards*vnodes)
	for s := 0; s < shards; s++ {
		for i := 0; i < vnodes; i++ {
			vs = append(vs, VNode{TokenText(fmt.Sprintf("shard-%d#%d", s, i)), fmt.Sprintf("shard-%d", s)})
		}
	}
	return MustNew(vs)
}

func BenchmarkOwner(b *testing.B) {
	r := benchRing(64, 256)
	toks := make([]int64, 4096)
	rnd := rand.New(rand.NewPCG(3, 4))
	for i := range toks {
		toks[i] = int64(rnd.Uint64())
	}
	b.ReportAllocs()
	b.ResetTimer()
	var sink string
	for i := 0; i < b.N; i++ {
		sink = r.Owner(toks[i&4095])
	}
	_ = sink
}

func BenchmarkOwnerText(b *testing.B) {
	r := benchRing(64, 256)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = r.OwnerText("user:123456")
	}
}

func TestOwnerDoesNotAllocate(t *testing.T) {
	r := benchRing(8, 16)
	if n := testing.AllocsPerRun(1000, func() { _ = r.Owner(12345) }); n != 0 {
		t.Fatalf("Owner allocates %v times", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = r.OwnerText("user:42") }); n != 0 {
		t.Fatalf("OwnerText allocates %v times", n)
	}
}

// FuzzRingOwner builds a ring from fuzzed tokens and checks Owner (bucket
// index) against a linear scan and against Ranges.
func FuzzRingOwner(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, int64(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0x80}, int64(MinToken))
	f.Fuzz(func(t *testing.T, raw []byte, probe int64) {
		var vs []VNode
		seen := map[int64]bool{}
		for i := 0; i+8 <= len(raw) && len(vs) < 64; i += 8 {
			tok := int64(uint64(raw[i]) | uint64(raw[i+1])<<8 | uint64(raw[i+2])<<16 | uint64(raw[i+3])<<24 |
				uint64(raw[i+4])<<32 | uint64(raw[i+5])<<40 | uint64(raw[i+6])<<48 | uint64(raw[i+7])<<56)
			if tok == MinToken || seen[tok] {
				continue
			}
			seen[tok] = true
			vs = append(vs, VNode{tok, fmt.Sprintf("s%d", raw[i]%3)})
		}
		if len(vs) == 0 {
			return
		}
		r := MustNew(vs)
		sorted := r.VNodes()
		want := sorted[0].Shard // wrap
		for _, v := range sorted {
			if v.Token >= probe {
				want = v.Shard
				break
			}
		}
		if got := r.Owner(probe); got != want {
			t.Fatalf("Owner(%d) = %s, linear scan %s (%v)", probe, got, want, sorted)
		}
		if !ContainsAny(r.Ranges(want), probe) {
			t.Fatalf("Ranges(%s) do not contain %d", want, probe)
		}
	})
}
