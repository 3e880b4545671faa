package ring

import (
	"errors"
	"slices"
)

// Overlay is the ring of a migration in progress: every token in cutOver is
// owned as in new (its range is cut over), every other token as in old (it
// is still served by its old owner). Routers route with it while the moves of
// a plan old → new are cut over one by one, so each migrating range belongs
// entirely to its current owner.
//
// The result keeps every vnode token of new and adds only the tokens needed
// to draw the boundary between old and new ownership, so that
// Overlay(old, new, every range of Diff(old, new)) has exactly new's vnodes,
// and Overlay(cur, old, ranges) gives back old's vnodes once no range is cut
// over anymore (a rollback restores the ring it started from).
func Overlay(old, new *Ring, cutOver []Range) (*Ring, error) {
	if old == nil || new == nil {
		return nil, errors.New("ring overlay: both rings are required")
	}
	cut := Normalize(cutOver)
	// Between two consecutive tokens of the union below, old's owner, new's
	// owner and membership in cut are all constant. MaxToken is a bound so
	// that the wrap range is only [MinToken, first].
	toks := make([]int64, 0, len(old.tokens)+len(new.tokens)+2*len(cut)+1)
	toks = append(toks, old.tokens...)
	toks = append(toks, new.tokens...)
	for _, r := range cut {
		if r.Lo != MinToken {
			toks = append(toks, r.Lo)
		}
		toks = append(toks, r.Hi)
	}
	toks = append(toks, MaxToken)
	slices.Sort(toks)
	toks = slices.Compact(toks)

	owner := func(t int64) string {
		if ContainsAny(cut, t) {
			return new.Owner(t)
		}
		return old.Owner(t)
	}
	owners := make([]string, len(toks))
	for i, t := range toks {
		owners[i] = owner(t)
	}
	// Drop a token that is not one of new's when the range after it has the
	// same owner: merging its range into the next one changes no owner. The
	// range after the last token is the wrap, owned by the first token's
	// owner; dropping tokens never changes the owner of any range, so one
	// pass over the original owners is enough.
	vs := make([]VNode, 0, len(new.tokens)+2*len(cut)+1)
	for i, t := range toks {
		next := owners[0]
		if i+1 < len(toks) {
			next = owners[i+1]
		}
		if _, inNew := slices.BinarySearch(new.tokens, t); !inNew && owners[i] == next {
			continue
		}
		vs = append(vs, VNode{Token: t, Shard: owners[i]})
	}
	r, err := New(vs)
	if err != nil {
		return nil, err
	}
	specs := new.specs()
	for _, s := range old.specs() {
		if !new.HasShard(s.Name) {
			specs = append(specs, s)
		}
	}
	return r.withInfo(specs), nil
}
