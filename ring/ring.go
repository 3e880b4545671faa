package ring

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// VNode is one virtual node: the shard that owns the range (prev, Token],
// where prev is the previous token on the ring.
type VNode struct {
	Token int64  `json:"token"`
	Shard string `json:"shard"`
}

// Ring maps tokens to shards. It is immutable after construction, so a
// router can share one *Ring between goroutines without locks. It carries no
// version: versions are the topology's business.
type Ring struct {
	tokens []int64  // sorted, distinct, never MinToken
	owners []int32  // owners[i] indexes shards: the owner of tokens[i]
	shards []string // sorted, distinct
	// info holds weights and failure domains, when known (Build, WithShards).
	info map[string]Shard
	// bucket indexes tokens by their top bits so that Owner touches one or
	// two cache lines instead of binary-searching the whole array:
	// bucket[b] is the index of the first token whose top bits are >= b.
	bucket []int32
	shift  uint
}

// New builds a ring from vnodes (in any order).
//
// A token equal to MinToken is refused: the vnode after it would own
// (MinToken, t], and a Range whose Lo is MinToken includes MinToken (range.go),
// so that range could not be written down without also naming MinToken, which
// belongs to the MinToken vnode. Keeping MinToken free makes it part of the
// wrapping range, written [MinToken, first].
func New(vnodes []VNode) (*Ring, error) {
	if len(vnodes) == 0 {
		return nil, errors.New("ring: no vnodes; a ring needs at least one shard")
	}
	vs := vnodes
	byToken := func(a, b VNode) int { return cmp.Compare(a.Token, b.Token) }
	if !slices.IsSortedFunc(vs, byToken) { // planners pass sorted vnodes
		vs = slices.Clone(vnodes)
		slices.SortFunc(vs, byToken)
	}
	r := &Ring{tokens: make([]int64, len(vs)), owners: make([]int32, len(vs))}
	names := map[string]int32{}
	for i, v := range vs {
		if v.Shard == "" {
			return nil, fmt.Errorf("ring: vnode at token %d has no shard name", v.Token)
		}
		if v.Token == MinToken {
			return nil, fmt.Errorf("ring: vnode of %s at token %d (MinToken): MinToken cannot end a range (lo, hi], choose another token", v.Shard, v.Token)
		}
		if i > 0 && vs[i-1].Token == v.Token {
			return nil, fmt.Errorf("ring: duplicate token %d (shards %s and %s)", v.Token, vs[i-1].Shard, v.Shard)
		}
		r.tokens[i] = v.Token
		if _, ok := names[v.Shard]; !ok {
			names[v.Shard] = 0
			r.shards = append(r.shards, v.Shard)
		}
	}
	if len(r.shards) > math.MaxInt32 {
		return nil, errors.New("ring: too many shards")
	}
	slices.Sort(r.shards)
	for j, name := range r.shards {
		names[name] = int32(j)
	}
	for i, v := range vs {
		r.owners[i] = names[v.Shard]
	}
	r.buildIndex()
	return r, nil
}

// ukey maps a token to uint64 preserving order.
func ukey(t int64) uint64 { return uint64(t) ^ 1<<63 }

// buildIndex sizes the bucket table to the power of two at or above the
// number of tokens (about one token per bucket).
func (r *Ring) buildIndex() {
	k := uint(1)
	for 1<<k < len(r.tokens) {
		k++
	}
	r.shift = 64 - k
	r.bucket = make([]int32, 1<<k+1)
	i := 0
	for b := range r.bucket {
		for i < len(r.tokens) && ukey(r.tokens[i])>>r.shift < uint64(b) {
			i++
		}
		r.bucket[b] = int32(i)
	}
}

// MustNew is New for rings known to be valid (tests, literals); it panics on error.
func MustNew(vnodes []VNode) *Ring {
	r, err := New(vnodes)
	if err != nil {
		panic(err)
	}
	return r
}

// VNodes returns the vnodes sorted by token (a copy).
func (r *Ring) VNodes() []VNode {
	out := make([]VNode, len(r.tokens))
	for i, t := range r.tokens {
		out[i] = VNode{Token: t, Shard: r.shards[r.owners[i]]}
	}
	return out
}

// Len is the number of vnodes.
func (r *Ring) Len() int { return len(r.tokens) }

// Shards returns the shard names, sorted (a copy).
func (r *Ring) Shards() []string { return slices.Clone(r.shards) }

// HasShard reports whether shard owns at least one vnode.
func (r *Ring) HasShard(shard string) bool {
	_, ok := slices.BinarySearch(r.shards, shard)
	return ok
}

// index returns the index of the vnode owning token: the first vnode token
// >= token, wrapping to the first vnode past the last one.
func (r *Ring) index(token int64) int {
	b := ukey(token) >> r.shift
	lo, hi := int(r.bucket[b]), int(r.bucket[b+1])
	// Every token in [lo, hi) shares token's top bits; the first one >= token
	// owns it, and if none is, the first token of a later bucket does.
	if hi-lo > 8 { // clustered tokens: stay logarithmic
		i, _ := slices.BinarySearch(r.tokens[lo:hi], token)
		lo += i
	} else {
		for lo < hi && r.tokens[lo] < token {
			lo++
		}
	}
	if lo == len(r.tokens) {
		return 0
	}
	return lo
}

// Owner returns the shard owning token. It does not allocate.
func (r *Ring) Owner(token int64) string {
	return r.shards[r.owners[r.index(token)]]
}

// OwnerOf returns the shard owning a key given in PostgreSQL text form (see TokenOf).
func (r *Ring) OwnerOf(kt KeyType, key string) (string, error) {
	t, err := TokenOf(kt, key)
	if err != nil {
		return "", err
	}
	return r.Owner(t), nil
}

// OwnerInt64 returns the shard owning an integer key.
func (r *Ring) OwnerInt64(key int64) string { return r.Owner(TokenInt64(key)) }

// OwnerText returns the shard owning a text key.
func (r *Ring) OwnerText(key string) string { return r.Owner(TokenText(key)) }

// OwnerUUID returns the shard owning a uuid key.
func (r *Ring) OwnerUUID(key [16]byte) string { return r.Owner(TokenUUID(key)) }

// vnodeRange appends the ranges owned by vnode i: (prev, token], or for the
// first vnode the wrap, (last, MaxToken] and [MinToken, first].
func (r *Ring) vnodeRange(dst []Range, i int) []Range {
	if i > 0 {
		return append(dst, Range{Lo: r.tokens[i-1], Hi: r.tokens[i]})
	}
	last := r.tokens[len(r.tokens)-1]
	if last != MaxToken {
		dst = append(dst, Range{Lo: last, Hi: MaxToken})
	}
	return append(dst, Range{Lo: MinToken, Hi: r.tokens[0]})
}

// Ranges returns the token ranges shard owns, normalized (sorted, adjacent
// ranges merged). The wrapping range comes as (last, MaxToken] and
// [MinToken, first]. An unknown shard owns nothing.
func (r *Ring) Ranges(shard string) []Range {
	j, ok := slices.BinarySearch(r.shards, shard)
	if !ok {
		return nil
	}
	var out []Range
	for i, o := range r.owners {
		if int(o) == j {
			out = r.vnodeRange(out, i)
		}
	}
	return Normalize(out)
}

// OwnedRange is a range with its owner.
type OwnedRange struct {
	Range Range  `json:"range"`
	Shard string `json:"shard"`
}

// AllRanges returns every vnode's range with its owner, in token order, the
// wrap split in two ((last, MaxToken] last, [MinToken, first] first). The
// ranges cover the token space exactly once.
func (r *Ring) AllRanges() []OwnedRange {
	out := make([]OwnedRange, 0, len(r.tokens)+1)
	out = append(out, OwnedRange{Range{MinToken, r.tokens[0]}, r.shards[r.owners[0]]})
	for i := 1; i < len(r.tokens); i++ {
		out = append(out, OwnedRange{Range{r.tokens[i-1], r.tokens[i]}, r.shards[r.owners[i]]})
	}
	if last := r.tokens[len(r.tokens)-1]; last != MaxToken {
		out = append(out, OwnedRange{Range{last, MaxToken}, r.shards[r.owners[0]]})
	}
	return out
}

// Share returns the fraction of the token space each shard owns.
func (r *Ring) Share() map[string]float64 {
	out := make(map[string]float64, len(r.shards))
	for j, v := range r.shareByIndex() {
		out[r.shards[j]] = v
	}
	return out
}

// shareByIndex is Share indexed like r.shards.
func (r *Ring) shareByIndex() []float64 {
	out := make([]float64, len(r.shards))
	n := len(r.tokens)
	for i, t := range r.tokens {
		w := float64(uint64(t - r.tokens[(i+n-1)%n]))
		if n == 1 {
			w = twoTo64
		}
		out[r.owners[i]] += w / twoTo64
	}
	return out
}

const twoTo64 = 18446744073709551616.0

type ringJSON struct {
	VNodes []VNode `json:"vnodes"`
}

// MarshalJSON renders the ring as {"vnodes":[{"token":..,"shard":..},...]} in token order.
func (r *Ring) MarshalJSON() ([]byte, error) {
	return json.Marshal(ringJSON{VNodes: r.VNodes()})
}

// UnmarshalJSON reads the form MarshalJSON writes, with New's checks.
func (r *Ring) UnmarshalJSON(b []byte) error {
	var j ringJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("ring: %w", err)
	}
	nr, err := New(j.VNodes)
	if err != nil {
		return err
	}
	*r = *nr
	return nil
}

// String is a short summary, e.g. "ring(4 shards, 64 vnodes)".
func (r *Ring) String() string {
	return fmt.Sprintf("ring(%d shards, %d vnodes: %s)", len(r.shards), len(r.tokens), strings.Join(r.shards, ","))
}
