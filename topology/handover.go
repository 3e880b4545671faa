package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reshard/reshard/ring"
)

// Handover is one change of a move's ranges in the topology, applied to
// whatever version is current (other moves of the same migration publish
// concurrently), so publishing it is a compare-and-set loop, and idempotent:
// Done says whether the current version already has it.
//
// The four changes of a move's life:
//   - Begin (JOINING): the ranges become migrating(From→To), still served by From.
//   - CutOver (cutover's publish): migrating, served by To.
//   - Complete (CLEANUP): stable, owned by To.
//   - GiveBack (rollback, before or during GRACE): stable, owned by From.
type Handover struct {
	Ranges   []ring.Range
	From, To string
	// Owner serves the ranges after the change (From or To).
	Owner string
	// Ring is the ring the ranges' owners are taken from: the plan's target
	// ring for Begin, CutOver and Complete (Begin takes no owner from it, it
	// only adds its tokens), the pre-migration ring for GiveBack. The
	// published ring is ring.Overlay(current ring, Ring, Ranges), so the ring
	// of the last move completed is exactly the target ring, and of the last
	// move given back exactly the pre-migration ring.
	Ring *ring.Ring
	// Migrating keeps (or makes) the ranges migrating(From→To); false makes
	// them stable.
	Migrating   bool
	Reason      string
	MigrationID string
}

// Begin marks the ranges migrating, still served by from.
func Begin(target *ring.Ring, ranges []ring.Range, from, to, reason string) Handover {
	return Handover{Ranges: ranges, From: from, To: to, Owner: from, Ring: target, Migrating: true, Reason: reason}
}

// CutOver hands the ranges to to, still migrating (GRACE: from is kept
// current by reverse CDC).
func CutOver(target *ring.Ring, ranges []ring.Range, from, to, reason string) Handover {
	return Handover{Ranges: ranges, From: from, To: to, Owner: to, Ring: target, Migrating: true, Reason: reason}
}

// Complete makes the ranges stable on to (CLEANUP).
func Complete(target *ring.Ring, ranges []ring.Range, from, to, reason string) Handover {
	return Handover{Ranges: ranges, From: from, To: to, Owner: to, Ring: target, Reason: reason}
}

// GiveBack makes the ranges stable on from again (rollback); old is the
// pre-migration ring.
func GiveBack(old *ring.Ring, ranges []ring.Range, from, to, reason string) Handover {
	return Handover{Ranges: ranges, From: from, To: to, Owner: from, Ring: old, Reason: reason}
}

func (h Handover) check() error {
	if h.Ring == nil || len(ring.Normalize(h.Ranges)) == 0 || h.From == "" || h.To == "" || h.From == h.To {
		return fmt.Errorf("handover of %v from %q to %q: a ring, ranges and two distinct shards are required", h.Ranges, h.From, h.To)
	}
	if h.Owner != h.From && h.Owner != h.To {
		return fmt.Errorf("handover of %v: owner %q is neither %q nor %q", h.Ranges, h.Owner, h.From, h.To)
	}
	return nil
}

// Owns reports whether the ring gives every token of ranges to shard.
func Owns(r *ring.Ring, shard string, ranges []ring.Range) bool { return owned(r, shard, ranges) }

// owned reports whether the ring gives every token of ranges to shard.
func owned(r *ring.Ring, shard string, ranges []ring.Range) bool {
	mine := r.Ranges(shard)
	for _, rg := range ring.Normalize(ranges) {
		in := false
		for _, o := range mine {
			if o.Lo <= rg.Lo && rg.Hi <= o.Hi {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	return true
}

// Done reports whether cur already has the change.
func (h Handover) Done(cur Topology) bool {
	want := ring.Normalize(h.Ranges)
	// Begin changes no owner: the current owner is From.
	if !owned(cur.Ring, h.Owner, want) {
		return false
	}
	var covered []ring.Range
	for _, m := range cur.Migrating() {
		for _, rg := range want {
			if m.Range.Lo < rg.Hi && rg.Lo < m.Range.Hi { // overlap
				if !h.Migrating || m.Owner != h.Owner || m.From != h.From || m.To != h.To {
					return false
				}
				covered = append(covered, ring.Range{Lo: max(m.Range.Lo, rg.Lo), Hi: min(m.Range.Hi, rg.Hi)})
			}
		}
	}
	if !h.Migrating {
		return true
	}
	c := ring.Normalize(covered)
	if len(c) != len(want) {
		return false
	}
	for i := range c {
		if c[i] != want[i] {
			return false
		}
	}
	return true
}

// Apply returns the next version of cur with the change.
func (h Handover) Apply(cur Topology) (Topology, error) {
	if err := h.check(); err != nil {
		return Topology{}, err
	}
	want := ring.Normalize(h.Ranges)
	if !owned(h.Ring, h.Owner, want) && h.Owner == h.To {
		return Topology{}, fmt.Errorf("handover of %v to %s: the target ring does not give them to %s", want, h.Owner, h.Owner)
	}
	var next *ring.Ring
	var err error
	if h.Owner == h.From && h.Migrating { // Begin: owners as they are, the ring's tokens added
		next, err = ring.Overlay(cur.Ring, h.Ring, nil)
	} else {
		next, err = ring.Overlay(cur.Ring, h.Ring, want)
	}
	if err != nil {
		return Topology{}, err
	}
	if !owned(next, h.Owner, want) {
		return Topology{}, fmt.Errorf("handover of %v to %s: the resulting ring gives them to %s, not to %s", want, h.Owner, next.Owner(want[0].Hi), h.Owner)
	}
	var migrating []RangeState
	for _, m := range cur.Migrating() {
		for _, piece := range ring.Subtract(m.Range, want) {
			p := m
			p.Range = piece
			migrating = append(migrating, p)
		}
	}
	if h.Migrating {
		for _, rg := range want {
			migrating = append(migrating, RangeState{Range: rg, Owner: h.Owner, Status: Migrating, From: h.From, To: h.To})
		}
	}
	t, err := New(next, migrating, h.Reason)
	if err != nil {
		return Topology{}, err
	}
	if h.MigrationID != "" {
		t = t.WithMigrationID(h.MigrationID)
	}
	return t, nil
}

// Publish makes the change current: it returns the version that has it,
// publishing one (compare-and-set on the current version, retried when
// another publisher got there first) unless the current one already does.
func (h Handover) Publish(ctx context.Context, store *Store) (int64, error) {
	return h.PublishGuarded(ctx, store, nil)
}

// PublishGuarded is Publish with a precondition checked in the publish's
// transaction (Guard).
func (h Handover) PublishGuarded(ctx context.Context, store *Store, guard Guard) (int64, error) {
	for attempt := 0; ; attempt++ {
		cur, err := store.Current(ctx)
		if err != nil {
			return 0, fmt.Errorf("read topology: %w", err)
		}
		if h.Done(cur) {
			return cur.Version, nil
		}
		next, err := h.Apply(cur)
		if err != nil {
			return 0, fmt.Errorf("topology version after %d: %w", cur.Version, err)
		}
		got, err := store.PublishGuarded(ctx, cur.Version, next, guard)
		if err == nil {
			return got.Version, nil
		}
		if !errors.Is(err, ErrVersionConflict) || attempt >= 20 {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
}

// Published reports whether the current topology has the change.
func (h Handover) Published(ctx context.Context, store *Store) (bool, error) {
	cur, err := store.Current(ctx)
	if err != nil {
		return false, fmt.Errorf("read topology: %w", err)
	}
	return h.Done(cur), nil
}
