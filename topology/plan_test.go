package topology

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/reshard/reshard/ring"
)

// A plan is stored once and read back whole; saving it again is a no-op, a
// different plan for the same migration is refused.
func TestPlanStoredOnce(t *testing.T) {
	s, _ := newControl(t)
	ctx := testCtx(t)
	if _, err := s.LoadPlan(ctx, "m1"); !errors.Is(err, ErrNoPlan) {
		t.Fatalf("LoadPlan of nothing: %v", err)
	}
	before := ring.MustNew([]ring.VNode{{Token: 0, Shard: "a"}, {Token: ring.MaxToken, Shard: "b"}})
	after, moves, err := ring.PlanChange(before, []ring.Shard{{Name: "a", Weight: 2}}, ring.Change{Kind: "add-node", Shard: "c", Opts: ring.Options{VNodes: 4}})
	if err != nil {
		t.Fatal(err)
	}
	p := Plan{MigrationID: "m1", FromVersion: 3, Before: before, After: after, Moves: moves}
	for range 2 {
		if err := s.SavePlan(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.LoadPlan(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if got.FromVersion != 3 || !slices.Equal(got.Before.VNodes(), before.VNodes()) || !slices.Equal(got.After.VNodes(), after.VNodes()) || !slices.Equal(got.Moves, moves) {
		t.Fatalf("loaded %+v, saved %+v", got, p)
	}
	other, _, err := ring.PlanChange(before, nil, ring.Change{Kind: "add-node", Shard: "d", Opts: ring.Options{VNodes: 4}})
	if err != nil {
		t.Fatal(err)
	}
	p.After = other
	if err := s.SavePlan(ctx, p); err == nil || !strings.Contains(err.Error(), "never replaced") {
		t.Fatalf("a second, different plan for m1: %v", err)
	}
}
