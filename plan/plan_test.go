package plan

import (
	"errors"
	"strings"
	"testing"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

func TestGroupMovesOnePerPair(t *testing.T) {
	moves := []ring.Move{
		{Range: ring.Range{Lo: 0, Hi: 10}, From: "a", To: "e"},
		{Range: ring.Range{Lo: 20, Hi: 30}, From: "b", To: "e"},
		{Range: ring.Range{Lo: 40, Hi: 50}, From: "a", To: "e"},
	}
	specs := topology.GroupMoves("Mig-2026/11", moves)
	if len(specs) != 2 || specs[0].From != "a" || len(specs[0].Ranges) != 2 || specs[1].From != "b" {
		t.Fatalf("specs %+v", specs)
	}
	for _, s := range specs {
		if _, err := cdc.ReverseNamesFor(s.ID); err != nil {
			t.Fatalf("move id %q: %v", s.ID, err)
		}
	}
	if specs[0].ID != "mig_2026_11_m1" {
		t.Fatalf("id %q", specs[0].ID)
	}
	long := topology.GroupMoves(strings.Repeat("x", 80), moves)
	if _, err := cdc.ReverseNamesFor(long[1].ID); err != nil || long[0].ID == long[1].ID {
		t.Fatalf("long ids %q %q: %v", long[0].ID, long[1].ID, err)
	}
}

// Compute groups the moves as the workflow runs them: one per (source,
// target) pair, in the order the pairs first appear in token order, with
// ids only when the migration has one.
func TestComputeGroupsInTokenOrder(t *testing.T) {
	r, err := ring.Build([]ring.Shard{{Name: "shard2"}, {Name: "shard1"}, {Name: "shard3"}}, ring.Options{VNodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.New(r, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	c := ring.Change{Kind: "add-node", Shard: "shard4", Opts: ring.Options{VNodes: 16, Tokens: ring.AllocBalanced}}
	p, err := Compute(topo, nil, Request{Migration: "add-x", Change: c})
	if err != nil {
		t.Fatal(err)
	}
	want := topology.GroupMoves("add-x", p.Moves)
	if len(p.Grouped) != 3 || len(want) != 3 {
		t.Fatalf("grouped %+v", p.Grouped)
	}
	var sum float64
	for i, g := range p.Grouped {
		if g.ID != want[i].ID || g.From != want[i].From || g.ID != topology.MoveID("add-x", i+1) {
			t.Errorf("move %d: %+v, want %+v", i, g, want[i])
		}
		sum += Fraction(g)
	}
	if d := sum - p.Moved; d > 1e-9 || d < -1e-9 || p.Moved < 0.24 || p.Moved > 0.26 {
		t.Errorf("moves cover %.6f, moved %.6f (want about 0.25)", sum, p.Moved)
	}
	if s := p.Stored(); s.MigrationID != "add-x" || s.Before != r || s.After != p.After || len(s.Moves) != len(p.Moves) {
		t.Errorf("stored %+v", s)
	}
	dry, err := Compute(topo, nil, Request{Change: c})
	if err != nil || len(dry.Grouped) != 3 || dry.Grouped[0].ID != "" || dry.Grouped[0].From != p.Grouped[0].From {
		t.Errorf("dry run: %v %+v", err, dry.Grouped)
	}
	for _, tc := range []struct {
		c    ring.Change
		want string
	}{
		{ring.Change{Kind: "add-node", Shard: "shard1"}, "already has a shard shard1"},
		{ring.Change{Kind: "remove-node", Shard: "shard9"}, "has no shard shard9"},
		{ring.Change{Kind: "split", Shard: "shard1", Into: "shard2"}, "--into shard2: topology v0 already has"},
		{ring.Change{Kind: "rebalance", Weights: map[string]float64{"shard9": 2}}, "--weight shard9"},
		{ring.Change{Kind: "grow"}, "unknown migration kind"},
	} {
		_, err := Compute(topo, nil, Request{Change: tc.c})
		var in *InputError
		if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an InputError mentioning %q", tc.c, err, tc.want)
		}
	}
}
