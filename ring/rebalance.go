package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Target is the wanted end state of a ring, written as a change to it: shards
// to add, shards to remove, new weights. PlanRebalance plans it as one change.
type Target struct {
	// Add are new shards (a Weight of 0 means 1).
	Add []Shard
	// Remove are shards leaving the ring; their whole share moves.
	Remove []string
	// Weights sets new weights of shards that stay (Name and Weight; the
	// shard's failure domain is kept).
	Weights []Shard
	// Among, when not empty, confines the change to these shards and the
	// added ones: the space they own now is shared among them by weight, and
	// every other shard keeps exactly its ranges. A split is Add: [into],
	// Among: [shard]. Removed shards always take part.
	Among []string
}

func (t Target) String() string {
	var parts []string
	if len(t.Add) > 0 {
		var n []string
		for _, s := range t.Add {
			n = append(n, s.Name)
		}
		parts = append(parts, "add "+strings.Join(n, ","))
	}
	if len(t.Remove) > 0 {
		parts = append(parts, "remove "+strings.Join(t.Remove, ","))
	}
	for _, s := range t.Weights {
		parts = append(parts, fmt.Sprintf("weight %s=%g", s.Name, s.weight()))
	}
	if len(t.Among) > 0 {
		parts = append(parts, "among "+strings.Join(t.Among, ","))
	}
	if len(parts) == 0 {
		return "rebalance"
	}
	return strings.Join(parts, "; ")
}

// shareEpsilon is the share difference a rebalance ignores: about 1.8e10
// tokens, far below anything a balance bound can see, and above the one-token
// differences of evenly spaced rings.
const shareEpsilon = 1e-9

// PlanRebalance plans the change from old to the target t as one change with
// the least movement: every shard ends at its weighted share of the space
// (of the space of Among, when given), and only the shards above that share
// give, only the shards below it receive. Adding K shards to N balanced ones
// moves K/(N+K) of the space. Each moved range has one source and one target:
// no range moves twice, as it would in a sequence of add-nodes.
//
// With balanced tokens (and always with Among), a giving shard cuts the low
// part of its largest ranges, or hands over whole ranges when it leaves;
// cuts are exact, so every shard ends at its share up to a token. With hash
// tokens (Among empty) the plan is the classic ring's: added shards get the
// tokens of "<shard>#<i>", removed shards' tokens are dropped; new weights
// need balanced tokens there.
func PlanRebalance(old *Ring, t Target, o Options) (*Ring, []Move, error) {
	mode, err := o.mode()
	if err != nil {
		return nil, nil, err
	}
	final, scope, err := t.resolve(old)
	if err != nil {
		return nil, nil, err
	}
	var next *Ring
	if mode == AllocHash && len(t.Among) == 0 {
		if len(t.Weights) > 0 {
			return nil, nil, errors.New("new weights with hash tokens: a hashed ring changes a shard's share only by its vnode count; plan weights with balanced tokens")
		}
		next, err = old.hashTarget(t, o)
	} else {
		next, err = old.balancedTarget(t, final, scope, o)
	}
	if err != nil {
		return nil, nil, err
	}
	return plan(old, next.withInfo(final))
}

// resolve checks t against old and returns the shards of the new ring (old
// shards with their new weights, then the added ones) and the names taking
// part in the change.
func (t Target) resolve(old *Ring) (final []Shard, scope map[string]bool, err error) {
	removed := map[string]bool{}
	for _, name := range t.Remove {
		if !old.HasShard(name) {
			return nil, nil, fmt.Errorf("remove %s: no such shard in the ring (shards: %s)", name, strings.Join(old.shards, ","))
		}
		if removed[name] {
			return nil, nil, fmt.Errorf("remove %s: listed twice; name each shard once", name)
		}
		removed[name] = true
	}
	weight := map[string]Shard{}
	for _, s := range t.Weights {
		if err := s.validate(); err != nil {
			return nil, nil, fmt.Errorf("weight: %w", err)
		}
		switch {
		case !old.HasShard(s.Name):
			return nil, nil, fmt.Errorf("weight of %s: no such shard in the ring (shards: %s); give a new shard's weight where it is added", s.Name, strings.Join(old.shards, ","))
		case removed[s.Name]:
			return nil, nil, fmt.Errorf("weight of %s: the shard is removed; drop its weight or keep the shard", s.Name)
		case weight[s.Name].Name != "":
			return nil, nil, fmt.Errorf("weight of %s: given twice; give each shard's weight once", s.Name)
		}
		weight[s.Name] = s
	}
	added := map[string]bool{}
	for _, s := range t.Add {
		if err := s.validate(); err != nil {
			return nil, nil, fmt.Errorf("add: %w", err)
		}
		if old.HasShard(s.Name) {
			return nil, nil, fmt.Errorf("add %s: the ring already has a shard %s; choose a new name", s.Name, s.Name)
		}
		if added[s.Name] {
			return nil, nil, fmt.Errorf("add %s: listed twice; name each shard once", s.Name)
		}
		added[s.Name] = true
	}
	for _, spec := range old.specs() {
		if removed[spec.Name] {
			continue
		}
		if w, ok := weight[spec.Name]; ok {
			spec.Weight = w.Weight
		}
		final = append(final, spec)
	}
	final = append(final, t.Add...)
	if len(final) == 0 {
		return nil, nil, fmt.Errorf("remove %s: that is every shard; the ring needs at least one", strings.Join(t.Remove, ","))
	}
	scope = map[string]bool{}
	if len(t.Among) == 0 {
		for _, s := range old.shards {
			scope[s] = true
		}
	}
	for _, name := range t.Among {
		if !old.HasShard(name) {
			return nil, nil, fmt.Errorf("among %s: no such shard in the ring (shards: %s)", name, strings.Join(old.shards, ","))
		}
		scope[name] = true
	}
	for name := range removed {
		scope[name] = true
	}
	for name := range added {
		scope[name] = true
	}
	for _, s := range t.Weights {
		if !scope[s.Name] {
			return nil, nil, fmt.Errorf("weight of %s: the shard is not among %s; name it there too", s.Name, strings.Join(t.Among, ","))
		}
	}
	stays := false
	for _, s := range final {
		stays = stays || scope[s.Name]
	}
	if !stays {
		return nil, nil, fmt.Errorf("among %s: every one of them is removed and none added; their space needs an owner among them", strings.Join(t.Among, ","))
	}
	return final, scope, nil
}

// hashTarget is the classic ring: removed shards' tokens dropped, added
// shards' tokens at TokenText("<shard>#<i>").
func (r *Ring) hashTarget(t Target, o Options) (*Ring, error) {
	added := map[int64]bool{}
	var extra []VNode
	for _, s := range t.Add {
		extra = appendHashVNodes(extra, s.Name, o.vnodes(s), r.tokens, added)
	}
	if len(t.Remove) == 0 && len(t.Add) == 1 {
		return r.adding(extra) // the common add-node: a merge, not a sort
	}
	vs := slices.DeleteFunc(r.VNodes(), func(v VNode) bool { return slices.Contains(t.Remove, v.Shard) })
	return New(append(vs, extra...))
}

// flow is a part of one shard's excess going to one shard below its share.
type flow struct {
	from, to int     // indexes into the giver and taker lists
	amount   float64 // tokens
	pieces   int     // vnodes the taker should get from this flow
	left     float64 // tokens still to place (pour)
}

// party is a shard whose share changes: a giver above its wanted share (or
// leaving) or a taker below it.
type party struct {
	name    string
	amount  float64 // excess (giver) or deficit (taker), in tokens
	want    float64 // wanted share (taker), in tokens
	leaving bool
	flows   []int
}

// balancedTarget moves the excess of every shard above its wanted share to
// the shards below theirs. Givers and takers are paired in name order
// (the north-west corner of the transport table), which gives at most
// givers+takers-1 pairs, so few (source, target) moves: adding 4 shards to 4
// makes 4 pairs, one per source, and 16 to 64 makes 48, three per source.
func (r *Ring) balancedTarget(t Target, final []Shard, scope map[string]bool, o Options) (*Ring, error) {
	givers, takers, spec := r.parties(t, final, scope)
	if len(givers) == 0 {
		return r, nil // already at the target: nothing moves
	}
	if len(takers) == 0 { // only a leaving shard with a sliver of space
		best := ""
		for _, s := range final {
			if scope[s.Name] && (best == "" || s.weight() > spec[best].weight()) {
				best = s.Name
			}
		}
		takers = append(takers, party{name: best, amount: 1, want: 1})
	}
	flows := pairFlows(givers, takers)
	apportionPieces(givers, takers, flows, spec, o)
	owner, extra := r.cutGivers(givers, takers, flows)
	return r.withCuts(owner, extra)
}

// parties are the shards of scope above their wanted share (givers, and
// every leaving shard) and below it (takers), each list in name order, and
// the final shards by name.
func (r *Ring) parties(t Target, final []Shard, scope map[string]bool) (givers, takers []party, spec map[string]Shard) {
	share := r.shareByIndex()
	var space, totalW float64
	for j, name := range r.shards {
		if scope[name] {
			space += share[j]
		}
	}
	if len(t.Among) == 0 {
		space = 1 // the whole space, without the shares' rounding
	}
	spec = map[string]Shard{}
	for _, s := range final {
		spec[s.Name] = s
		if scope[s.Name] {
			totalW += s.weight()
		}
	}
	leaving := map[string]bool{}
	for _, name := range t.Remove {
		leaving[name] = true
	}
	names := slices.Clone(r.shards)
	for _, s := range t.Add {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !scope[name] {
			continue
		}
		have := 0.0
		if j, ok := slices.BinarySearch(r.shards, name); ok {
			have = share[j]
		}
		want := 0.0
		if s, ok := spec[name]; ok {
			want = space * s.weight() / totalW
		}
		switch d := have - want; {
		case leaving[name]:
			givers = append(givers, party{name: name, amount: have * twoTo64, leaving: true})
		case d > shareEpsilon:
			givers = append(givers, party{name: name, amount: d * twoTo64})
		case d < -shareEpsilon:
			takers = append(takers, party{name: name, amount: -d * twoTo64, want: want * twoTo64})
		}
	}
	return givers, takers, spec
}

// pairFlows is the north-west corner: it pours givers into takers, both in
// name order, and records each flow's index on its giver and taker. A
// sliver below shareEpsilon makes no pair (it stays where it is), except
// that a leaving shard always has one.
func pairFlows(givers, takers []party) []flow {
	tiny := shareEpsilon * twoTo64
	var flows []flow
	gi, ti := 0, 0
	gl, tl := givers[0].amount, takers[0].amount
	for gi < len(givers) {
		lastTaker := ti == len(takers)-1
		a := gl
		if !lastTaker && tl < gl {
			a = tl
		}
		if a > tiny || a == gl && len(givers[gi].flows) == 0 {
			givers[gi].flows = append(givers[gi].flows, len(flows))
			takers[ti].flows = append(takers[ti].flows, len(flows))
			flows = append(flows, flow{from: gi, to: ti, amount: a, left: a})
		}
		gl -= a
		tl -= a
		if tl <= tiny && !lastTaker {
			ti++
			tl = takers[ti].amount
		}
		if gl <= tiny {
			if gi++; gi < len(givers) {
				gl = givers[gi].amount
			}
		}
	}
	return flows
}

// apportionPieces sets each flow's pieces: a taker's vnodes, its vnode
// count scaled by how much of its share it receives, shared among its
// flows by amount.
func apportionPieces(givers, takers []party, flows []flow, spec map[string]Shard, o Options) {
	for _, tk := range takers {
		count := o.vnodes(spec[tk.name])
		if tk.want > 0 && tk.amount < tk.want {
			count = max(1, int(math.Round(float64(count)*tk.amount/tk.want)))
		}
		keys := make([]string, len(tk.flows))
		amt := map[string]float64{}
		for i, f := range tk.flows {
			keys[i] = givers[flows[f].from].name
			amt[keys[i]] = flows[f].amount
		}
		n := apportion(keys, amt, count)
		for i, f := range tk.flows {
			flows[f].pieces = n[keys[i]]
		}
	}
}

// cutGivers places the flows in the givers' ranges: owner maps a vnode
// index to its new owner (a leaving shard's ranges, given whole), extra are
// the new tokens cut into the ranges, each owned by its taker.
func (r *Ring) cutGivers(givers, takers []party, flows []flow) (owner map[int]string, extra []VNode) {
	byShard := make([][]span, len(r.shards))
	for _, sp := range r.spans() {
		o := r.owners[sp.vnode]
		sp.rank = bits.Reverse32(uint32(len(byShard[o])))
		byShard[o] = append(byShard[o], sp)
	}
	owner = map[int]string{}
	add := func(v VNode) { extra = append(extra, v) }
	// cut adds a token at each segment's end but the last, owned by the
	// segment's taker; a segment with no room for its token joins the next.
	cut := func(sp span, segs []segment, ends []float64) {
		toks, ok := placeCuts(sp, ends)
		for i, tok := range toks {
			if ok[i] {
				add(VNode{Token: tok, Shard: takers[segs[i].f.to].name})
			}
		}
	}
	for _, g := range givers {
		if len(g.flows) == 0 {
			continue
		}
		j, _ := slices.BinarySearch(r.shards, g.name)
		sps := byShard[j]
		fl := make([]*flow, len(g.flows))
		pieces, amount := 0, 0.0
		for i, f := range g.flows {
			fl[i] = &flows[f]
			pieces += flows[f].pieces
			amount += flows[f].amount
		}
		if g.leaving {
			// Every range goes, whole, largest first, each to the taker with
			// the most still to receive; a range is cut only where one taker
			// is full and the next begins.
			slices.SortFunc(sps, spanOrder)
			for _, sp := range sps {
				segs := pour(fl, []float64{sp.w()})
				ends := segmentEnds(segs)
				cut(sp, segs[:len(segs)-1], ends[:len(ends)-1])
				owner[sp.vnode] = takers[segs[len(segs)-1].f.to].name
			}
			continue
		}
		giveLowParts(sps, fl, takers, pieces, amount, add, cut)
	}
	return owner, extra
}

// giveLowParts cuts a staying giver's share of its flows (fl: pieces
// vnodes, amount tokens) from the low part of its largest ranges sps, in
// proportion to their widths; add and cut record the new tokens.
func giveLowParts(sps []span, fl []*flow, takers []party, pieces int, amount float64, add func(VNode), cut func(span, []segment, []float64)) {
	n := min(max(pieces, 1), len(sps))
	selectLargest(sps, n)
	sum := 0.0
	for _, sp := range sps[:n] {
		sum += sp.w()
	}
	for n < len(sps) && sum <= amount*(1+1e-9) { // the largest ranges alone cannot hold the excess
		selectLargest(sps[n:], 1)
		sum += sps[n].w()
		n++
	}
	if len(fl) == 1 {
		// One taker: one cut per range (an add-node's or a split's plan).
		for _, sp := range sps[:n] {
			if tok, ok := cutToken(sp, amount*sp.w()/sum); ok {
				add(VNode{Token: tok, Shard: takers[fl[0].to].name})
			}
		}
		return
	}
	// Several takers: each range's piece is cut in about pieces/n parts
	// that take turns among the takers, so each gets ranges all around.
	per, more := pieces/n, pieces%n
	for k, sp := range sps[:n] {
		parts := max(1, per)
		if k < more {
			parts++
		}
		piece := amount * sp.w() / sum
		sizes := make([]float64, parts)
		for i := range sizes {
			sizes[i] = piece / float64(parts)
		}
		segs := pour(fl, sizes)
		cut(sp, segs, segmentEnds(segs))
	}
}

// withCuts is r with the vnodes of owner reassigned and the extra tokens
// added.
func (r *Ring) withCuts(owner map[int]string, extra []VNode) (*Ring, error) {
	if len(owner) == 0 && len(extra) > 0 && !slices.ContainsFunc(extra, func(v VNode) bool { return v.Shard != extra[0].Shard || r.HasShard(v.Shard) }) {
		return r.adding(extra) // one new shard, nothing reassigned: a merge, not a sort
	}
	vs := r.VNodes()
	for i, name := range owner {
		vs[i].Shard = name
	}
	// Merge the sorted vnodes with the new ones: New then need not sort.
	slices.SortFunc(extra, func(a, b VNode) int { return cmp.Compare(a.Token, b.Token) })
	all := make([]VNode, 0, len(vs)+len(extra))
	for len(vs) > 0 || len(extra) > 0 {
		if len(extra) == 0 || len(vs) > 0 && vs[0].Token <= extra[0].Token {
			all, vs = append(all, vs[0]), vs[1:]
		} else {
			all, extra = append(all, extra[0]), extra[1:]
		}
	}
	return New(all)
}

// spanOrder is largest first; among equal spans (a fresh balanced ring), in
// bit-reversed order of their position, so cuts spread around the ring
// instead of bunching at its start.
func spanOrder(a, b span) int {
	if c := cmp.Compare(b.w(), a.w()); c != 0 {
		return c
	}
	return cmp.Compare(a.rank, b.rank)
}

// selectLargest moves the n first spans in spanOrder to the front of sps.
func selectLargest(sps []span, n int) {
	if n > 4 { // usually one or a few per shard: select, don't sort
		slices.SortFunc(sps, spanOrder)
		return
	}
	for i := 0; i < n && i < len(sps); i++ {
		best := i
		for k := i + 1; k < len(sps); k++ {
			if spanOrder(sps[k], sps[best]) < 0 {
				best = k
			}
		}
		sps[i], sps[best] = sps[best], sps[i]
	}
}

// segment is a run of tokens of one flow inside a span.
type segment struct {
	f    *flow
	size float64
}

// pour hands consecutive parts of the given sizes to the flows, each part to
// the flow with the most left to place (the first, on a tie); a part larger
// than that is split at the flow's end. Once every flow is full, what is left
// (rounding) goes to the last one chosen, so nothing is left unplaced.
func pour(fl []*flow, sizes []float64) []segment {
	var segs []segment
	for _, size := range sizes {
		for size > 0 {
			best := fl[0]
			for _, f := range fl[1:] {
				if f.left > best.left {
					best = f
				}
			}
			take := size
			if best.left > 1 && best.left < size && size-best.left >= 1 {
				take = best.left
			}
			best.left -= take
			size -= take
			if n := len(segs); n > 0 && segs[n-1].f == best {
				segs[n-1].size += take
			} else {
				segs = append(segs, segment{best, take})
			}
		}
	}
	return segs
}

// segmentEnds are the offsets (tokens from the span's start) at which each
// segment ends.
func segmentEnds(segs []segment) []float64 {
	ends := make([]float64, len(segs))
	at := 0.0
	for i, s := range segs {
		at += s.size
		ends[i] = at
	}
	return ends
}

// placeCuts turns offsets inside sp into tokens, each at least one token
// after the previous and before the span's end, never MinToken (as cutToken).
// ok[i] is false for an offset with no room left.
func placeCuts(sp span, offs []float64) (toks []int64, ok []bool) {
	toks, ok = make([]int64, len(offs)), make([]bool, len(offs))
	maxOff := sp.width - 1 // width 0 means 2^64: every offset fits
	prev := uint64(0)
	for i, piece := range offs {
		var off uint64
		switch {
		case piece >= float64(maxOff):
			off = maxOff
		case piece > 1:
			off = uint64(piece)
		}
		off = max(prev+1, min(off, maxOff))
		if sp.width == 1 || off > maxOff || off <= prev {
			continue
		}
		t := int64(uint64(sp.start) + off)
		if t == MinToken {
			if off == maxOff {
				continue
			}
			t, off = t+1, off+1
		}
		toks[i], ok[i], prev = t, true, off
	}
	return toks, ok
}

// PlanSteps plans t one shard at a time, as a sequence of migrations would:
// an add-node per added shard, then a remove-node per removed shard, then one
// rebalance for the new weights. It returns each step's moves: their moved
// fractions add up to what the sequence copies, which PlanRebalance's one
// plan never exceeds (adding 4 shards to 4: 0.634 against 0.500), because a
// range taken by one added shard can be taken again by the next.
func PlanSteps(old *Ring, t Target, o Options) ([][]Move, error) {
	among := slices.Clone(t.Among)
	var steps []Target
	for _, s := range t.Add {
		steps = append(steps, Target{Add: []Shard{s}, Among: slices.Clone(among)})
		if len(among) > 0 {
			among = append(among, s.Name)
		}
	}
	for _, name := range t.Remove {
		steps = append(steps, Target{Remove: []string{name}, Among: slices.Clone(among)})
		if len(among) > 0 {
			among = slices.DeleteFunc(among, func(s string) bool { return s == name })
		}
	}
	if len(t.Weights) > 0 {
		steps = append(steps, Target{Weights: t.Weights, Among: among})
	}
	var out [][]Move
	r := old
	for _, st := range steps {
		next, moves, err := PlanRebalance(r, st, o)
		if err != nil {
			return nil, fmt.Errorf("step %s: %w", st, err)
		}
		out = append(out, moves)
		r = next
	}
	return out, nil
}
