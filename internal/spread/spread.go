// Package spread orders samples so that any prefix of them is spread
// evenly over what they sample: capacity's probes read a few chunks of a
// table and must see its parts in proportion, not only its first ones.
package spread

import "math/bits"

// Order returns 0..n-1 in base-2 radix-inverse (van der Corput) order:
// 0, n/2, n/4, 3n/4, n/8, ... Each prefix of 2^j indices holds one index
// in each of 2^j equal parts of [0, n) (for n a power of two; about so
// for other n), so a probe that stops after any number of them has
// sampled the whole range, not its beginning.
func Order(n int) []int {
	if n <= 0 {
		return nil
	}
	m, shift := 1, 0
	for m < n {
		m <<= 1
		shift++
	}
	out := make([]int, 0, n)
	for i := range m {
		// i's lowest shift bits, reversed.
		r := int(bits.Reverse64(uint64(i)) >> (64 - shift))
		if shift == 0 {
			r = 0
		}
		if r < n {
			out = append(out, r)
		}
	}
	return out
}
