package topology

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/reshard/reshard/ring"
)

// RangeStatus is the state of a token range in one topology version.
type RangeStatus string

const (
	// Stable: the range is served by its owner and nothing is moving it.
	Stable RangeStatus = "stable"
	// Migrating: a move of the range from From to To is under way. Its Owner
	// (the shard that serves it, the ring's owner) is From until cutover and
	// To after it, until the move ends and the range becomes stable again.
	Migrating RangeStatus = "migrating"
)

// RangeState is one range of a topology with its owner and state.
type RangeState struct {
	Range  ring.Range  `json:"range"`
	Owner  string      `json:"owner"`
	Status RangeStatus `json:"state"`
	// From and To are set only while Migrating.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// CutOver reports whether a migrating range is already served by its new
// owner (cutover done, the old owner still kept current by reverse CDC).
func (s RangeState) CutOver() bool { return s.Status == Migrating && s.Owner == s.To }

func (s RangeState) String() string {
	if s.Status == Migrating {
		return fmt.Sprintf("%s %s(%s->%s) owner=%s", s.Range, s.Status, s.From, s.To, s.Owner)
	}
	return fmt.Sprintf("%s %s owner=%s", s.Range, s.Status, s.Owner)
}

// Topology is one version of the source of truth: the ring that says who
// owns which token, and the ranges being moved. It is an immutable value: the
// ring is immutable and the migrating ranges are only reachable through
// copies, so a Topology can be shared between goroutines freely.
type Topology struct {
	// Version is assigned by Store.Publish; it is ignored in the argument of
	// Publish.
	Version int64
	Ring    *ring.Ring
	// Reason says why this version exists ("initial", "cutover of move m1").
	Reason string
	// MigrationID names the migration that published it, "" when none.
	MigrationID string
	CreatedAt   time.Time

	migrating []RangeState // sorted by Range.Lo, disjoint, all Migrating
}

// New builds a topology from a ring and the ranges currently migrating
// (in any order). Every range not listed is stable. It checks that every
// migrating range is owned, in the ring, entirely by its Owner, and that
// Owner is its From (before cutover) or its To (after it).
func New(r *ring.Ring, migrating []RangeState, reason string) (Topology, error) {
	t := Topology{Ring: r, Reason: reason, migrating: slices.Clone(migrating)}
	slices.SortFunc(t.migrating, func(a, b RangeState) int {
		switch {
		case a.Range.Lo < b.Range.Lo:
			return -1
		case a.Range.Lo > b.Range.Lo:
			return 1
		}
		return 0
	})
	if err := t.validate(); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// WithMigrationID returns a copy of t naming the migration that publishes it.
func (t Topology) WithMigrationID(id string) Topology {
	t.MigrationID = id
	return t
}

func (t Topology) validate() error {
	if t.Ring == nil {
		return errors.New("topology: no ring")
	}
	for i, m := range t.migrating {
		if !m.Range.Valid() {
			return fmt.Errorf("topology: migrating range %s is empty or wraps; split a wrapping range in two", m.Range)
		}
		if i > 0 && m.Range.Lo < t.migrating[i-1].Range.Hi {
			return fmt.Errorf("topology: migrating ranges %s and %s overlap", t.migrating[i-1].Range, m.Range)
		}
		if m.Status != Migrating {
			return fmt.Errorf("topology: range %s listed as migrating has state %q", m.Range, m.Status)
		}
		if m.From == "" || m.To == "" || m.From == m.To {
			return fmt.Errorf("topology: migrating range %s needs two distinct shards From and To (have %q, %q)", m.Range, m.From, m.To)
		}
		if m.Owner != m.From && m.Owner != m.To {
			return fmt.Errorf("topology: migrating range %s: owner %q is neither its source %q nor its target %q", m.Range, m.Owner, m.From, m.To)
		}
		if !within(m.Range, t.Ring.Ranges(m.Owner)) {
			return fmt.Errorf("topology: migrating range %s: the ring does not give all of it to its owner %q", m.Range, m.Owner)
		}
	}
	return nil
}

// within reports whether r lies inside one of owned (normalized ranges, so a
// contiguous r owned by one shard lies inside a single one of them).
func within(r ring.Range, owned []ring.Range) bool {
	for _, o := range owned {
		if o.Lo <= r.Lo && r.Hi <= o.Hi {
			return true
		}
	}
	return false
}

// Migrating returns the ranges being moved, sorted by token (a copy).
func (t Topology) Migrating() []RangeState { return slices.Clone(t.migrating) }

// State returns the state of the range holding token: a migrating entry, or
// a stable one covering the token's vnode range.
func (t Topology) State(token int64) RangeState {
	if s, ok := t.MigratingAt(token); ok {
		return s
	}
	for _, or := range t.Ring.AllRanges() {
		if or.Range.Contains(token) {
			return RangeState{Range: or.Range, Owner: or.Shard, Status: Stable}
		}
	}
	return RangeState{Owner: t.Ring.Owner(token), Status: Stable} // unreachable: AllRanges covers the space
}

// MigratingAt finds the migrating range holding token, without allocating
// (the router asks it on every read).
func (t Topology) MigratingAt(token int64) (RangeState, bool) {
	i, _ := slices.BinarySearchFunc(t.migrating, token, func(s RangeState, tok int64) int {
		if s.Range.Hi < tok {
			return -1
		}
		return 1
	})
	if i < len(t.migrating) && t.migrating[i].Range.Contains(token) {
		return t.migrating[i], true
	}
	return RangeState{}, false
}

// States returns every range of the token space with its owner and state, in
// token order: the ring's vnode ranges, cut where a migrating range begins or
// ends. This is what the control database stores per version.
func (t Topology) States() []RangeState {
	all := t.Ring.AllRanges()
	out := make([]RangeState, 0, len(all)+2*len(t.migrating))
	mi := 0
	for _, or := range all {
		cur := or.Range
		for cur.Valid() {
			for mi < len(t.migrating) && t.migrating[mi].Range.Hi <= cur.Lo {
				mi++
			}
			if mi == len(t.migrating) || t.migrating[mi].Range.Lo >= cur.Hi {
				out = append(out, RangeState{Range: cur, Owner: or.Shard, Status: Stable})
				break
			}
			m := t.migrating[mi]
			if m.Range.Lo > cur.Lo {
				out = append(out, RangeState{Range: ring.Range{Lo: cur.Lo, Hi: m.Range.Lo}, Owner: or.Shard, Status: Stable})
				cur.Lo = m.Range.Lo
			}
			// m starts at or before cur.Lo; validate made m lie within one
			// owner's ranges, which is not the same as within one vnode range.
			piece := m
			piece.Range = ring.Range{Lo: cur.Lo, Hi: min(cur.Hi, m.Range.Hi)}
			out = append(out, piece)
			cur.Lo = piece.Range.Hi
		}
	}
	return out
}

// fromStates rebuilds the migrating list from a stored per-range list,
// merging pieces of one migrating range that States cut at vnode bounds.
func fromStates(states []RangeState) []RangeState {
	var out []RangeState
	for _, s := range states {
		if s.Status != Migrating {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Range.Hi == s.Range.Lo &&
			out[n-1].Owner == s.Owner && out[n-1].From == s.From && out[n-1].To == s.To {
			out[n-1].Range.Hi = s.Range.Hi
			continue
		}
		out = append(out, s)
	}
	return out
}
