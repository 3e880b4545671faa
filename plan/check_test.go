package plan

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// The cutover steps a plan's check shows are the first move's dry run: it
// names the move by its id, or in a dry run (no ids) by its pair, and the
// budget it is given.
func TestCutoverStepsOfTheFirstMove(t *testing.T) {
	r, err := ring.Build([]ring.Shard{{Name: "shard1"}, {Name: "shard2"}}, ring.Options{VNodes: 8})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.New(r, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	c := ring.Change{Kind: "add-node", Shard: "shard3", Opts: ring.Options{VNodes: 8, Tokens: ring.AllocBalanced}}
	for _, id := range []string{"", "add-x"} {
		p, err := Compute(topo, nil, Request{Migration: id, Change: c})
		if err != nil {
			t.Fatal(err)
		}
		steps, err := cutoverSteps(context.Background(), p, 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		first := p.Grouped[0]
		name := first.From + "->" + first.To
		if id != "" {
			name = first.ID
		}
		all := strings.Join(steps, "\n")
		if len(steps) < 5 || !strings.Contains(steps[0], "(move "+name+")") || !strings.Contains(all, "1.5s") {
			t.Errorf("migration %q: steps\n%s", id, all)
		}
	}
}

// A plan with a capacity refusal has a problem, as one with a preflight
// problem does.
func TestCheckProblemsCountRefusals(t *testing.T) {
	c := Check{Report: Report{Problems: 2}}
	if c.Problems() != 2 {
		t.Errorf("preflight problems: %d", c.Problems())
	}
	c = Check{Capacity: &capacity.Report{Refusals: []capacity.Refusal{{Shard: "shard1"}}}}
	if c.Problems() != 1 {
		t.Errorf("a refusal: %d problems", c.Problems())
	}
}
