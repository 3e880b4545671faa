package planview

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// What a migration verb prints once it started the workflow.
func TestStartedWrite(t *testing.T) {
	r, err := ring.Build([]ring.Shard{{Name: "shard1"}, {Name: "shard2"}}, ring.Options{VNodes: 4})
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{Request: workflows.MigrationRequest{ID: "add-x", Kind: workflows.KindAddNode, Shard: "shard3",
		StreamAuto: true, StreamAfterCopy: "table public.tags has a text primary key"},
		Plan: plan.Plan{From: topology.Topology{Version: 2, Ring: r}, Moved: 0.25}, Pairs: []Pair{{Source: "shard1", Target: "shard3"}}}
	var out strings.Builder
	if err := (Started{Plan: p, RunID: "run1", UI: "http://ui/x"}).Write(&out, false); err != nil {
		t.Fatal(err)
	}
	want := "started migration add-x: " + p.Summary() + "\nworkflow  reshard-add-x\nstream    after the copy: table public.tags has a text primary key\nui        http://ui/x\nfollow    reshard status add-x --watch\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if err := (Started{Plan: p, RunID: "run1"}).Write(&out, true); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || got["workflow_id"] != "reshard-add-x" || got["run_id"] != "run1" ||
		got["moves"] != 1.0 || got["moved_fraction"] != 0.25 || got["ui"] != nil || !strings.HasPrefix(out.String(), "{\n  \"id\": \"add-x\",") {
		t.Errorf("JSON %s: %v", out.String(), err)
	}
}

func TestNextStepsAndQuoting(t *testing.T) {
	if got := NextSteps("reshard split shard1 --into shard5", 0); len(got) != 1 || got[0] != "reshard split shard1 --into shard5" {
		t.Errorf("clean plan: %q", got)
	}
	if got := NextSteps("reshard split shard1 --into shard5", 2); len(got) != 1 || got[0] != "reshard plan split shard1 --into shard5" {
		t.Errorf("with problems: %q", got)
	}
	for in, want := range map[string]string{"users:id": "users:id", "": "''", "SELECT 1": "'SELECT 1'", "it's": `'it'\''s'`, "(1,2]": "'(1,2]'"} {
		if got := ShellQuote(in); got != want {
			t.Errorf("ShellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// reshard plan says in one line when the moves stream, and why after the
// copy when the default chose it.
func TestPlanWriteSaysWhenTheMovesStream(t *testing.T) {
	for _, tc := range []struct {
		req  workflows.MigrationRequest
		want string
	}{
		{workflows.MigrationRequest{Kind: workflows.KindAddNode, Shard: "shard3", StreamAuto: true, StreamDuringCopy: true}, "\nstream during the copy (the default where the keyspace allows it)\n"},
		{workflows.MigrationRequest{Kind: workflows.KindAddNode, Shard: "shard3", StreamAuto: true, StreamAfterCopy: "table public.tags has a text primary key"},
			"\nstream after the copy: table public.tags has a text primary key\n"},
		{workflows.MigrationRequest{Kind: workflows.KindAddNode, Shard: "shard3"}, "\nstream after the copy\n"},
	} {
		var out strings.Builder
		Write(&out, Report{Request: tc.req, What: "add-node shard3", Pairs: []PairReport{{Pair: Pair{Source: "shard1", Target: "shard3"}}}})
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("plan lacks %q:\n%s", tc.want, out.String())
		}
	}
}
