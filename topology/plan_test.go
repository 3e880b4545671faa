package topology

import (
	"errors"
	"maps"
	"math"
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
	if got.Capacity != nil {
		t.Fatalf("a plan saved without a prediction loads with one: %s", got.Capacity)
	}
	// The prediction made when the migration started stays: a retried PLAN
	// that probes again does not replace it.
	for _, c := range []string{`{"moves":[{"id":"m1","copy_seconds":12}]}`, `{"moves":[{"id":"m1","copy_seconds":99}]}`} {
		if err := s.SavePlanCapacity(ctx, "m1", []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err = s.LoadPlan(ctx, "m1"); err != nil || !strings.Contains(string(got.Capacity), `"copy_seconds": 12`) {
		t.Fatalf("capacity %s, %v: want the first prediction", got.Capacity, err)
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

// A plan that reweighs shards stores its weights; the publish of its
// planned ring (EndMigration) writes them to the registry in the same
// transaction, and nothing else does: not the start, not an end with moves
// rolled back (the old weights stay), not an end the cutovers did not make
// true, not an end with weights for a shard the ring lacks.
func TestMigrationEndWritesPlannedWeights(t *testing.T) {
	s, _ := newControl(t)
	ctx := testCtx(t)
	register(t, s, "a", "b", "c")
	o := ring.Options{VNodes: 16, Tokens: ring.AllocBalanced}
	before, err := ring.Build([]ring.Shard{{Name: "a"}, {Name: "b"}, {Name: "c"}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(ctx, 0, mustTopo(t, before.VNodes(), nil, "initial")); err != nil {
		t.Fatal(err)
	}
	weights := func() map[string]float64 {
		t.Helper()
		shards, err := s.Shards(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, sh := range shards {
			out[sh.Name] = sh.Weight
		}
		return out
	}
	reg := []ring.Shard{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}
	plan := func(id string, w map[string]float64, from *ring.Ring, fromVersion int64) Plan {
		t.Helper()
		after, moves, err := ring.PlanChange(from, reg, ring.Change{Kind: "rebalance", Weights: w, Opts: o})
		if err != nil {
			t.Fatal(err)
		}
		p := Plan{MigrationID: id, FromVersion: fromVersion, Before: from, After: after, Moves: moves, Weights: w}
		if err := s.SavePlan(ctx, p); err != nil {
			t.Fatal(err)
		}
		got, err := s.LoadPlan(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range w {
			if got.Weights[name] != want || got.After.Spec(name).Weight != want {
				t.Fatalf("plan %s loaded: weight of %s %g (ring after: %g), want %g", id, name, got.Weights[name], got.After.Spec(name).Weight, want)
			}
		}
		return got
	}
	start := func(p Plan) {
		t.Helper()
		pairs := map[[2]string]int{}
		var mv []MoveRanges
		for _, m := range p.Moves {
			k := [2]string{m.From, m.To}
			if _, ok := pairs[k]; !ok {
				pairs[k] = len(mv)
				mv = append(mv, MoveRanges{Source: m.From, Target: m.To})
			}
			mv[pairs[k]].Ranges = append(mv[pairs[k]].Ranges, m.Range)
		}
		if _, err := StartMigration(ctx, s, p.MigrationID, "rebalance", p.FromVersion, p.Before, p.After, mv, nil); err != nil {
			t.Fatal(err)
		}
	}
	old := map[string]float64{"a": 1, "b": 1, "c": 1}

	// a weighs 2: it takes a half of the space from b and c.
	p := plan("w1", map[string]float64{"a": 2}, before, 1)
	if len(p.Moves) == 0 {
		t.Fatal("a new weight planned no move")
	}
	start(p)
	if got := weights(); !maps.Equal(got, old) {
		t.Fatalf("weights after the start: %v, want the old %v", got, old)
	}
	// Before the cutovers the planned ring is not true: refused, nothing written.
	if _, err := EndMigration(ctx, s, "w1", "rebalance", p.After, p.Weights); !errors.Is(err, ErrNotCutOver) {
		t.Fatalf("end before the cutovers: %v, want ErrNotCutOver", err)
	}
	if got := weights(); !maps.Equal(got, old) {
		t.Fatalf("weights after a refused end: %v, want the old %v", got, old)
	}
	// Bad weights: refused with the shard named, nothing published or written.
	cur, err := s.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]float64{{"zz": 2}, {"a": -1}} {
		if _, err := EndMigration(ctx, s, "w1", "rebalance", p.After, bad); err == nil || !errors.Is(err, ErrInvalidTopology) || !strings.Contains(err.Error(), "shard") {
			t.Fatalf("end with weights %v: %v, want an invalid-topology error naming the shard", bad, err)
		}
	}
	if now, _ := s.Current(ctx); now.Version != cur.Version || !maps.Equal(weights(), old) {
		t.Fatalf("bad weights changed something: v%d (was v%d), weights %v", now.Version, cur.Version, weights())
	}
	// The cutovers (one publish here): the planned ring, nothing migrating.
	done, err := s.Publish(ctx, cur.Version, mustTopo(t, p.After.VNodes(), nil, "cutovers").WithMigrationID("w1"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := EndMigration(ctx, s, "w1", "rebalance", p.After, p.Weights)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"a": 2, "b": 1, "c": 1}
	if got := weights(); v != done.Version+1 || !maps.Equal(got, want) {
		t.Fatalf("end published v%d (want v%d), weights %v, want %v", v, done.Version+1, got, want)
	}
	if again, err := EndMigration(ctx, s, "w1", "rebalance", p.After, p.Weights); err != nil || again != v {
		t.Fatalf("end again: v%d, %v; want v%d (idempotent)", again, err, v)
	}
	share := p.After.Share()
	if math.Abs(share["a"]-0.5) > 1e-6 {
		t.Fatalf("the planned ring gives a %.4f of the space, want 0.5", share["a"])
	}

	// b weighs 3, and the migration is rolled back: the old weights stay.
	reg = []ring.Shard{{Name: "a", Weight: 2}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}
	p2 := plan("w2", map[string]float64{"b": 3}, p.After, v)
	start(p2)
	if _, err := EndMigration(ctx, s, "w2", "rebalance", nil, p2.Weights); err != nil {
		t.Fatal(err)
	}
	end, err := s.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners := true // every vnode token of either ring owned as w1 left it
	for _, vn := range append(end.Ring.VNodes(), p.After.VNodes()...) {
		owners = owners && end.Ring.Owner(vn.Token) == p.After.Owner(vn.Token)
	}
	if got := weights(); !maps.Equal(got, want) || len(end.Migrating()) > 0 || !owners {
		t.Fatalf("after the rolled back w2: weights %v (want %v), %d ranges migrating, owners as before: %v", got, want, len(end.Migrating()), owners)
	}
}
