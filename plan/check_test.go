package plan

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
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

// The stream during the copy against the tables the preflight read: left
// to the default it is on for integer and uuid keys and off, with the
// table and its key's type, for a text key (no problem); given, a text key
// is a problem (the CLI exits 2) and integer keys pass; off stays off.
func TestStreamCheck(t *testing.T) {
	table := func(name, typ string) tableset.Table {
		return tableset.Table{Schema: "public", Name: name, KeyColumn: "id", PK: []string{"id"}, Columns: []tableset.Column{{Name: "id", Type: typ}}}
	}
	report := func(tables ...tableset.Table) Report {
		mr := MoveReport{Move: topology.PlannedMove{ID: "m1", From: "shard1", To: "shard5"}}
		mr.Source = tableset.Set{Tables: tables}
		return Report{Moves: []MoveReport{mr, mr}}
	}
	ints := []tableset.Table{table("users", "bigint"), table("sessions", "uuid"), table("orders", "integer")}
	withText := append(ints[:2:2], table("tags", "text"))
	for _, tc := range []struct {
		name         string
		tables       []tableset.Table
		on, auto     bool
		wantOn       bool
		wantWhy      string
		wantProblems int
	}{
		{"auto, integer and uuid keys", ints, true, true, true, "", 0},
		{"auto, a text key", withText, true, true, false, "table public.tags has a text primary key", 0},
		{"given, integer and uuid keys", ints, true, false, true, "", 0},
		{"given, a text key", withText, true, false, true, "", 1},
		{"off", withText, false, false, false, "", 0},
	} {
		pf := report(tc.tables...)
		on, why := streamCheck(&pf, tc.on, tc.auto)
		if on != tc.wantOn || why != tc.wantWhy || pf.Problems != tc.wantProblems || len(pf.Moves[0].Problems) != tc.wantProblems {
			t.Errorf("%s: on %v why %q problems %d (%v); want %v %q %d", tc.name, on, why, pf.Problems, pf.Moves[0].Problems, tc.wantOn, tc.wantWhy, tc.wantProblems)
		}
		if tc.wantProblems > 0 && !strings.Contains(pf.Moves[0].Problems[0].Error(), "public.tags") {
			t.Errorf("%s: problem %v does not name the table", tc.name, pf.Moves[0].Problems[0])
		}
	}
}
