package ring

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Move is a token range changing owner, from one shard to another.
type Move struct {
	Range Range
	From  string
	To    string
}

type moveJSON struct {
	Lo   int64  `json:"lo"`
	Hi   int64  `json:"hi"`
	From string `json:"from"`
	To   string `json:"to"`
}

// MarshalJSON renders {"lo":..,"hi":..,"from":..,"to":..}, lo exclusive and
// hi inclusive (a Lo of MinToken includes MinToken, as Range does).
func (m Move) MarshalJSON() ([]byte, error) {
	return json.Marshal(moveJSON{m.Range.Lo, m.Range.Hi, m.From, m.To})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (m *Move) UnmarshalJSON(b []byte) error {
	var j moveJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	r := Range{Lo: j.Lo, Hi: j.Hi}
	if !r.Valid() {
		return fmt.Errorf("move %s: lo must be below hi", r)
	}
	*m = Move{Range: r, From: j.From, To: j.To}
	return nil
}

func (m Move) String() string { return fmt.Sprintf("%s %s→%s", m.Range, m.From, m.To) }

// MovedFraction is the fraction of the token space the moves cover.
func MovedFraction(moves []Move) float64 {
	var w float64
	for _, m := range moves {
		w += m.Range.Width()
	}
	return w / twoTo64
}

// CompareSteps compares a plan's moves with the same change made one shard
// at a time (steps, PlanSteps): seq is the fraction the steps move in all,
// one the fraction the plan moves, and ratio one/seq (0 when the steps move
// nothing).
func CompareSteps(moves []Move, steps [][]Move) (seq, one, ratio float64) {
	for _, st := range steps {
		seq += MovedFraction(st)
	}
	one = MovedFraction(moves)
	if seq > 0 {
		ratio = one / seq
	}
	return seq, one, ratio
}

// Diff returns the ranges whose owner differs between old and new, in token
// order, adjacent ranges with the same from and to merged. A range crossing
// the wrap comes as two moves, (x, MaxToken] and [MinToken, y]. Every token
// outside the moves has the same owner in both rings.
func Diff(old, new *Ring) []Move {
	// Between two consecutive tokens of either ring, both owners are
	// constant; so the union of the tokens cuts the space into segments
	// each with one owner in each ring. MaxToken is always a bound, which
	// splits the wrap.
	bounds := make([]int64, 0, len(old.tokens)+len(new.tokens)+1)
	a, b := old.tokens, new.tokens
	for len(a) > 0 || len(b) > 0 {
		var t int64
		switch {
		case len(b) == 0 || len(a) > 0 && a[0] < b[0]:
			t, a = a[0], a[1:]
		case len(a) == 0 || b[0] < a[0]:
			t, b = b[0], b[1:]
		default:
			t, a, b = a[0], a[1:], b[1:]
		}
		bounds = append(bounds, t)
	}
	if bounds[len(bounds)-1] != MaxToken {
		bounds = append(bounds, MaxToken)
	}
	var moves []Move
	lo := MinToken
	for _, hi := range bounds {
		from, to := old.Owner(hi), new.Owner(hi)
		if from != to {
			if n := len(moves); n > 0 && moves[n-1].Range.Hi == lo && moves[n-1].From == from && moves[n-1].To == to {
				moves[n-1].Range.Hi = hi
			} else {
				moves = append(moves, Move{Range: Range{Lo: lo, Hi: hi}, From: from, To: to})
			}
		}
		lo = hi
	}
	return moves
}

func plan(old, next *Ring) (*Ring, []Move, error) {
	return next, Diff(old, next), nil
}

// PlanAddNode adds shard s: PlanRebalance with Add: [s]. In hash mode it gets
// the tokens of "<s>#<i>"; in balanced mode its tokens cut the largest ranges
// of the shards holding more than their weighted share, so it takes
// weight/(total weight) of the space, from every shard in proportion to its
// excess (for a balanced ring: evenly).
func PlanAddNode(old *Ring, s Shard, o Options) (*Ring, []Move, error) {
	next, moves, err := PlanRebalance(old, Target{Add: []Shard{s}}, o)
	if err != nil {
		return nil, nil, fmt.Errorf("add node %s: %w", s.Name, err)
	}
	return next, moves, nil
}

// PlanSplit moves part of shard's ranges to a new shard into: PlanRebalance
// with Add: [into], Among: [shard]. Its tokens cut the largest ranges of shard
// so that into takes weight(into)/(weight(shard)+weight(into)) of shard's space
// (half, for equal weights), from shard only. The allocation mode does not
// apply: a split by hashed tokens would take from every shard.
func PlanSplit(old *Ring, shard string, into Shard, o Options) (*Ring, []Move, error) {
	if !old.HasShard(shard) {
		return nil, nil, fmt.Errorf("split %s: no such shard in the ring (shards: %v)", shard, old.shards)
	}
	next, moves, err := PlanRebalance(old, Target{Add: []Shard{into}, Among: []string{shard}}, o)
	if err != nil {
		return nil, nil, fmt.Errorf("split %s: %w", shard, err)
	}
	return next, moves, nil
}

// PlanRemoveNode hands all of shard's ranges to the other shards:
// PlanRebalance with Remove: [shard]. In hash mode its tokens are dropped, so
// each range goes to the next shard clockwise (the classic ring). In balanced
// mode the tokens stay and each range, largest first, goes to the shard with
// the most still to receive to reach its weighted share, a range being cut
// where one shard is full and the next begins. On a ring whose shares match
// its weights, that moves exactly the removed shard's share; a shard holding
// more than its weighted share gives its excess too.
func PlanRemoveNode(old *Ring, shard string, o Options) (*Ring, []Move, error) {
	next, moves, err := PlanRebalance(old, Target{Remove: []string{shard}}, o)
	if err != nil {
		return nil, nil, fmt.Errorf("remove node %s: %w", shard, err)
	}
	return next, moves, nil
}

// PlanMove gives range rg to shard to (a new or an existing shard), leaving
// every other token with its owner: tokens are added at the range's bounds
// where needed and every vnode inside it is handed to `to`.
func PlanMove(old *Ring, rg Range, to string) (*Ring, []Move, error) {
	if !rg.Valid() {
		return nil, nil, fmt.Errorf("move %s: empty or wrapping range; give a wrapping range as two moves", rg)
	}
	if to == "" {
		return nil, nil, errors.New("move: no target shard")
	}
	vs := old.VNodes()
	has := make(map[int64]bool, len(vs))
	for _, v := range vs {
		has[v.Token] = true
	}
	add := func(t int64, shard string) {
		if !has[t] {
			has[t] = true
			vs = append(vs, VNode{Token: t, Shard: shard})
		}
	}
	// A token at Lo keeps (…, Lo] with its owner. Lo = MinToken has no token
	// (none may be MinToken); then a token at MaxToken keeps (last, MaxToken]
	// out of the wrap range that now ends inside rg.
	if rg.Lo != MinToken {
		add(rg.Lo, old.Owner(rg.Lo))
	} else if rg.Hi != MaxToken {
		add(MaxToken, old.Owner(MaxToken))
	}
	add(rg.Hi, to)
	for i := range vs {
		if rg.Contains(vs[i].Token) {
			vs[i].Shard = to
		}
	}
	next, err := New(vs)
	if err != nil {
		return nil, nil, fmt.Errorf("move %s to %s: %w", rg, to, err)
	}
	specs := old.specs()
	if !old.HasShard(to) {
		specs = append(specs, Shard{Name: to})
	}
	return plan(old, next.withInfo(specs))
}

// adding returns r plus extra vnodes, all of one new shard. It is New for
// the planners' common case, merging sorted token arrays instead of sorting
// and naming every vnode again, with the same checks.
func (r *Ring) adding(extra []VNode) (*Ring, error) {
	if len(extra) == 0 {
		return nil, errors.New("ring: no token could be placed for the new shard")
	}
	name := extra[0].Shard
	toks := make([]int64, len(extra))
	for i, v := range extra {
		if v.Shard != name {
			return New(append(r.VNodes(), extra...))
		}
		toks[i] = v.Token
	}
	slices.Sort(toks)
	if r.HasShard(name) {
		return nil, fmt.Errorf("ring: shard %s already has vnodes", name)
	}
	shards := append(slices.Clone(r.shards), name)
	slices.Sort(shards)
	newIdx, _ := slices.BinarySearch(shards, name)
	remap := make([]int32, len(r.shards)) // old owner index → new
	for j := range r.shards {
		remap[j] = int32(j)
		if j >= newIdx {
			remap[j]++
		}
	}
	nr := &Ring{
		tokens: make([]int64, 0, len(r.tokens)+len(toks)),
		owners: make([]int32, 0, len(r.tokens)+len(toks)),
		shards: shards,
	}
	a, b := 0, 0
	for a < len(r.tokens) || b < len(toks) {
		switch {
		case b == len(toks) || a < len(r.tokens) && r.tokens[a] < toks[b]:
			nr.tokens = append(nr.tokens, r.tokens[a])
			nr.owners = append(nr.owners, remap[r.owners[a]])
			a++
		case a < len(r.tokens) && r.tokens[a] == toks[b] || b > 0 && toks[b-1] == toks[b]:
			return nil, fmt.Errorf("ring: duplicate token %d", toks[b])
		default:
			if toks[b] == MinToken {
				return nil, fmt.Errorf("ring: vnode of %s at MinToken", name)
			}
			nr.tokens = append(nr.tokens, toks[b])
			nr.owners = append(nr.owners, int32(newIdx))
			b++
		}
	}
	nr.buildIndex()
	return nr, nil
}

// Change is what a migration asks of the ring.
type Change struct {
	Kind  string // "add-node", "split", "remove-node", "move" or "rebalance"
	Shard string // the new shard (add-node), the shard split or removed
	Into  string // split: the new shard taking half of Shard
	Range *Range // move
	To    string // move: the target
	// Add, Remove and Weights are a rebalance's target (see Target): shards
	// added, shards removed, new weights (of added shards: their weight,
	// default 1; of shards that stay: their new weight).
	Add     []string
	Remove  []string
	Weights map[string]float64
	Opts    Options
}

// Target is c's rebalance target; the weights in name order, so the same
// change always gives the same plan.
func (c Change) Target() Target {
	t := Target{Remove: c.Remove}
	for _, name := range c.Add {
		t.Add = append(t.Add, Shard{Name: name, Weight: c.Weights[name]})
	}
	names := make([]string, 0, len(c.Weights))
	for name := range c.Weights {
		if !slices.Contains(c.Add, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		t.Weights = append(t.Weights, Shard{Name: name, Weight: c.Weights[name]})
	}
	return t
}

// PlanChange is the one planner of a migration: the new ring and the moves
// that change old into it, for the change c, with the shards' registered
// weights and failure domains (shards the ring does not name are ignored).
// It is pure: the same inputs always give the same plan, which a migration
// computes once and stores.
func PlanChange(old *Ring, registry []Shard, c Change) (*Ring, []Move, error) {
	var specs []Shard
	for _, s := range registry {
		if old.HasShard(s.Name) {
			specs = append(specs, s)
		}
	}
	if len(specs) > 0 {
		var err error
		if old, err = old.WithShards(specs); err != nil {
			return nil, nil, fmt.Errorf("ring with the registry's weights: %w", err)
		}
	}
	switch c.Kind {
	case "add-node":
		return PlanAddNode(old, Shard{Name: c.Shard}, c.Opts)
	case "split":
		return PlanSplit(old, c.Shard, Shard{Name: c.Into}, c.Opts)
	case "remove-node":
		return PlanRemoveNode(old, c.Shard, c.Opts)
	case "move":
		if c.Range == nil {
			return nil, nil, errors.New("move: no range")
		}
		return PlanMove(old, *c.Range, c.To)
	case "rebalance":
		next, moves, err := PlanRebalance(old, c.Target(), c.Opts)
		if err != nil {
			return nil, nil, fmt.Errorf("rebalance: %w", err)
		}
		return next, moves, nil
	}
	return nil, nil, fmt.Errorf("unknown change %q (add-node, split, remove-node, move, rebalance)", c.Kind)
}
