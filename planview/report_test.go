package planview

import (
	"strings"
	"testing"

	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/workflows"
)

// The command a plan's report ends with starts what was planned: the same
// verb and what it names, the keyspace when not the default one, weights in
// name order.
func TestStartHint(t *testing.T) {
	for _, tc := range []struct {
		r    workflows.MigrationRequest
		want string
	}{
		{workflows.MigrationRequest{Kind: workflows.KindAddNode, Shard: "shard5"}, "add-node shard5 [same flags]"},
		{workflows.MigrationRequest{Kind: workflows.KindSplit, Shard: "shard1", Into: "shard5", Keyspace: "accts"}, "split shard1 --into shard5 --keyspace accts [same flags]"},
		{workflows.MigrationRequest{Kind: workflows.KindMove, Range: &ring.Range{Lo: -5, Hi: 7}, To: "shard2"}, "move --range -5:7 --to shard2 [same flags]"},
		{workflows.MigrationRequest{Kind: workflows.KindRebalance, Add: []string{"e", "f"}, Weights: map[string]float64{"b": 2, "a": 0.5}},
			"rebalance --add e,f --weight a=0.5 --weight b=2 [same flags]"},
	} {
		if got := StartHint(tc.r); got != tc.want {
			t.Errorf("StartHint(%s) = %q, want %q", tc.r.Kind, got, tc.want)
		}
	}
}

// A shard's problem found by two pairs is said once; a capacity refusal is
// a problem with its fix.
func TestProblemLines(t *testing.T) {
	pb := &tableset.Problem{Shard: "shard1", Table: "public.users", Check: "pk", Problem: "no primary key", Fix: "add one"}
	rep := Report{Pairs: []PairReport{{Problems: []*tableset.Problem{pb}}, {Problems: []*tableset.Problem{pb}}},
		Capacity: &capacity.Report{Refusals: []capacity.Refusal{{Check: "disk", Shard: "shard5", Problem: "too small", Fix: "grow it"}}}}
	got := strings.Join(ProblemLines(rep), "\n")
	want := "  [pk] shard1 public.users: no primary key\n      fix: add one\n  [capacity/disk] shard5: too small\n      fix: grow it"
	if got != want {
		t.Errorf("problem lines:\n%s\nwant:\n%s", got, want)
	}
}
