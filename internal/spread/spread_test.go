package spread

import (
	"slices"
	"testing"
)

func TestOrderIsAPermutation(t *testing.T) {
	for n := 0; n <= 70; n++ {
		o := Order(n)
		if len(o) != n {
			t.Fatalf("Order(%d) has %d indices", n, len(o))
		}
		s := slices.Clone(o)
		slices.Sort(s)
		for i, v := range s {
			if v != i {
				t.Fatalf("Order(%d) = %v: not a permutation of 0..%d", n, o, n-1)
			}
		}
	}
}

// Every prefix covers the range: among the first k indices, each of the k
// equal parts of [0, n) holds at most 2 of them (at most 1 when n and k are
// powers of two), so no prefix stays in one end.
func TestEveryPrefixIsSpread(t *testing.T) {
	if got, want := Order(8), []int{0, 4, 2, 6, 1, 5, 3, 7}; !slices.Equal(got, want) {
		t.Fatalf("Order(8) = %v, want %v", got, want)
	}
	for _, n := range []int{5, 16, 19, 64, 100, 1000} {
		o := Order(n)
		for k := 1; k <= n; k++ {
			parts := make([]int, k)
			for _, v := range o[:k] {
				parts[v*k/n]++
			}
			for p, c := range parts {
				if c > 2 {
					t.Fatalf("Order(%d)[:%d] puts %d indices in part %d of %d: %v", n, k, c, p, k, o[:k])
				}
			}
		}
		// The first half of any prefix of 4 or more reaches past the middle.
		if o[1] < n/2 {
			t.Fatalf("Order(%d)'s second index %d is not in the upper half", n, o[1])
		}
	}
}
