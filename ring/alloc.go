package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Shard describes a physical shard for allocation and placement.
type Shard struct {
	Name string `json:"name"`
	// Weight scales the shard's share of the token space; 0 means 1.
	Weight float64 `json:"weight,omitempty"`
	// Domain is the failure domain (rack, zone); Replicas spreads over
	// distinct domains first. Empty means the shard is its own domain.
	Domain string `json:"domain,omitempty"`
}

func (s Shard) weight() float64 {
	if s.Weight == 0 {
		return 1
	}
	return s.Weight
}

func (s Shard) validate() error {
	if s.Name == "" {
		return errors.New("shard with an empty name")
	}
	if s.Weight < 0 || math.IsNaN(s.Weight) || math.IsInf(s.Weight, 0) {
		return fmt.Errorf("shard %s: weight %v, want a positive number (0 means 1)", s.Name, s.Weight)
	}
	return nil
}

// Allocation is how new vnode tokens are chosen.
type Allocation string

const (
	// AllocHash places a shard's vnode i at TokenText("<shard>#<i>"): the
	// classic consistent-hash ring. Shares vary by about 1/sqrt(vnodes).
	AllocHash Allocation = "hash"
	// AllocBalanced places tokens deliberately: evenly spaced and interleaved
	// at first; later, a new shard's tokens split the largest ranges of the
	// shards that hold more than their weighted share.
	AllocBalanced Allocation = "balanced"
)

// ParseAllocation reads "hash" or "balanced".
func ParseAllocation(s string) (Allocation, error) {
	switch a := Allocation(strings.ToLower(strings.TrimSpace(s))); a {
	case AllocHash, AllocBalanced:
		return a, nil
	}
	return "", fmt.Errorf("token allocation %q: want %s or %s", s, AllocBalanced, AllocHash)
}

// DefaultVNodes is the vnodes per unit of weight of Options{} (the
// migration's default, workflows.DefaultVNodes: cmd/reshard's
// TestKnobsAgree checks they agree).
const DefaultVNodes = 16

// Options tunes allocation and planning.
type Options struct {
	// VNodes is the number of vnodes per unit of weight; 0 means
	// DefaultVNodes.
	VNodes int
	// Tokens is the allocation mode; empty means AllocBalanced.
	Tokens Allocation
}

func (o Options) vnodes(s Shard) int {
	v := o.VNodes
	if v <= 0 {
		v = DefaultVNodes
	}
	return max(1, int(math.Round(float64(v)*s.weight())))
}

func (o Options) mode() (Allocation, error) {
	if o.Tokens == "" {
		return AllocBalanced, nil
	}
	return ParseAllocation(string(o.Tokens))
}

// Build allocates an initial ring for shards.
func Build(shards []Shard, o Options) (*Ring, error) {
	if len(shards) == 0 {
		return nil, errors.New("ring: no shards")
	}
	mode, err := o.mode()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, s := range shards {
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("ring: %w", err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("ring: shard %s listed twice", s.Name)
		}
		seen[s.Name] = true
	}
	var vs []VNode
	switch mode {
	case AllocHash:
		added := map[int64]bool{}
		for _, s := range shards {
			vs = appendHashVNodes(vs, s.Name, o.vnodes(s), nil, added)
		}
	case AllocBalanced:
		vs = evenVNodes(shards, o)
	}
	r, err := New(vs)
	if err != nil {
		return nil, err
	}
	return r.withInfo(shards), nil
}

// appendHashVNodes appends n vnodes of shard at TokenText("<shard>#<i>"),
// skipping an i whose token is MinToken, in existing (sorted) or already
// added, so the result is deterministic and valid.
func appendHashVNodes(vs []VNode, shard string, n int, existing []int64, added map[int64]bool) []VNode {
	for i := 0; n > 0; i++ {
		t := TokenText(shard + "#" + strconv.Itoa(i))
		if _, found := slices.BinarySearch(existing, t); found || t == MinToken || added[t] {
			continue
		}
		added[t] = true
		vs = append(vs, VNode{Token: t, Shard: shard})
		n--
	}
	return vs
}

// evenVNodes spaces all vnodes evenly over the token space and interleaves
// the shards: shard i's k-th vnode sits at relative position
// (k + (i+½)/N) / count_i, so every shard's vnodes are spread around the ring
// and, for equal weights, the shards take turns.
func evenVNodes(shards []Shard, o Options) []VNode {
	type slot struct {
		pos   float64
		shard int
	}
	var slots []slot
	for i, s := range shards {
		c := o.vnodes(s)
		for k := 0; k < c; k++ {
			slots = append(slots, slot{(float64(k) + (float64(i)+0.5)/float64(len(shards))) / float64(c), i})
		}
	}
	slices.SortFunc(slots, func(a, b slot) int {
		if c := cmp.Compare(a.pos, b.pos); c != 0 {
			return c
		}
		return cmp.Compare(a.shard, b.shard)
	})
	vs := make([]VNode, len(slots))
	for j, sl := range slots {
		vs[j] = VNode{Token: evenToken(j, len(slots)), Shard: shards[sl.shard].Name}
	}
	return vs
}

// evenToken is the upper bound of the j-th of n equal ranges: MinToken +
// (j+1)·2^64/n. The last is MaxToken, none is MinToken.
func evenToken(j, n int) int64 {
	num := new(big.Int).Lsh(big.NewInt(int64(j+1)), 64)
	num.Div(num, big.NewInt(int64(n)))
	num.Sub(num, big.NewInt(1)) // (j+1)·2^64/n − 1 in [0, 2^64)
	return int64(num.Uint64() ^ 1<<63)
}

// withInfo returns a copy of r carrying the shards' weights and domains.
// Shards not in specs keep weight 1 and no domain.
func (r *Ring) withInfo(specs []Shard) *Ring {
	nr := *r
	nr.info = make(map[string]Shard, len(specs))
	for _, s := range specs {
		nr.info[s.Name] = s
	}
	return &nr
}

// WithShards returns a copy of r that knows the weights and failure domains
// of its shards (a ring read from JSON carries only vnodes). Planners use the
// weights, Replicas the domains.
func (r *Ring) WithShards(specs []Shard) (*Ring, error) {
	for _, s := range specs {
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("ring: %w", err)
		}
	}
	return r.withInfo(specs), nil
}

// Spec returns what r knows of shard: its weight and domain.
func (r *Ring) Spec(shard string) Shard {
	if s, ok := r.info[shard]; ok {
		return s
	}
	return Shard{Name: shard}
}

func (r *Ring) specs() []Shard {
	out := make([]Shard, 0, len(r.shards))
	for _, s := range r.shards {
		out = append(out, r.Spec(s))
	}
	return out
}

// span is a vnode's range on the circle: it starts after start (exclusive)
// and covers width tokens; width is 2^64 for a ring of one vnode, held as 0
// in a uint64, so widths are kept as float64 for weighing and uint64 offsets
// for placing.
type span struct {
	vnode int    // index of the vnode owning the span
	start int64  // previous token (exclusive)
	width uint64 // tokens in the span; 0 means 2^64 (one vnode)
	rank  uint32 // tie-break order among equal spans (spanOrder)
}

func (s span) w() float64 {
	if s.width == 0 {
		return twoTo64
	}
	return float64(s.width)
}

// spans returns every vnode's span, by vnode index.
func (r *Ring) spans() []span {
	n := len(r.tokens)
	out := make([]span, n)
	for i := range r.tokens {
		prev := r.tokens[(i+n-1)%n]
		out[i] = span{vnode: i, start: prev, width: uint64(r.tokens[i] - prev)}
	}
	return out
}

// cutToken places a token inside sp so that (sp.start, token] holds about
// piece tokens, at least one and leaving at least one to the span's owner,
// and never at MinToken. It reports false for a span too narrow to cut.
func cutToken(sp span, piece float64) (int64, bool) {
	maxOff := sp.width - 1 // width 0 means 2^64: every offset fits
	if sp.width == 1 {
		return 0, false
	}
	var off uint64
	switch {
	case piece >= float64(maxOff):
		off = maxOff
	case piece > 1:
		off = uint64(piece)
	}
	off = max(1, min(off, maxOff))
	t := int64(uint64(sp.start) + off)
	if t == MinToken { // keep MinToken free: step to a neighbour inside the span
		switch {
		case off < maxOff:
			t++
		case off > 1:
			t--
		default:
			return 0, false
		}
	}
	return t, true
}

// apportion shares count pieces among donors in proportion to weight by
// the largest remainder method (ties by name, so it is deterministic).
func apportion(donors []string, weight map[string]float64, count int) map[string]int {
	out := make(map[string]int, len(donors))
	var total float64
	for _, d := range donors {
		total += weight[d]
	}
	if total <= 0 || count <= 0 {
		return out
	}
	type rem struct {
		d string
		r float64
	}
	rems := make([]rem, 0, len(donors))
	given := 0
	for _, d := range donors {
		q := float64(count) * weight[d] / total
		f := math.Floor(q)
		out[d] = int(f)
		given += int(f)
		rems = append(rems, rem{d, q - f})
	}
	slices.SortStableFunc(rems, func(a, b rem) int { return cmp.Compare(b.r, a.r) })
	for i := 0; given < count && i < len(rems); i++ {
		out[rems[i].d]++
		given++
	}
	return out
}
