package topocheck

import (
	"testing"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/tableset"
)

// topology check's verdict: a shard in transition, or repaired, is not a
// problem; drift, misplaced or unplaced rows, ended migrations and objects
// left behind are, each counted.
func TestProblems(t *testing.T) {
	if err := Problems([]Report{{Shards: []Shard{
		{Shard: "a"},
		{Shard: "b", Drift: []string{"x"}, InTransition: []string{"cutover of m1"}},
		{Shard: "c", Drift: []string{"x"}, Repaired: []string{"t"}},
	}}}); err != nil {
		t.Fatalf("clean report: %v", err)
	}
	err := Problems([]Report{
		{Shards: []Shard{{Shard: "a", Drift: []string{"x"}}, {Shard: "b", Strays: []fence.Stray{{Rows: 1}}}}, Ended: []EndedMigration{{}}},
		{Shards: []Shard{{Shard: "c", Unplaced: []tableset.NullKeyRows{{Rows: 1}}}}, Leftovers: []Leftover{{}, {}}},
	})
	want := "3 shard(s) differ from the topology; 1 migration(s) ended with work left; 2 slot(s), publication(s) or origin(s) left behind"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}
