package topocheck

import (
	"slices"
	"testing"
	"time"

	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// A shard's stray space leaves out the ranges of its own running moves
// (both ends hold those rows until the move ends) and keeps the others'.
func TestStrayOutsideMoves(t *testing.T) {
	space := []ring.Range{{Lo: 0, Hi: 100}, {Lo: 200, Hi: 300}}
	running := []topology.RunningMove{
		{MigrationID: "m1", From: "s1", To: "s2", Ranges: []ring.Range{{Lo: 10, Hi: 20}}},
		{MigrationID: "m1", From: "s3", To: "s1", Ranges: []ring.Range{{Lo: 250, Hi: 300}}},
		{MigrationID: "m2", From: "s3", To: "s4", Ranges: []ring.Range{{Lo: 50, Hi: 60}}},
	}
	got := strayOutsideMoves(space, "s1", running)
	want := []ring.Range{{Lo: 0, Hi: 10}, {Lo: 20, Hi: 100}, {Lo: 200, Hi: 250}}
	if !slices.Equal(got, want) {
		t.Errorf("s1: %v, want %v", got, want)
	}
	if got := strayOutsideMoves(space, "s9", running); !slices.Equal(got, space) {
		t.Errorf("a shard without moves: %v, want the whole space %v", got, space)
	}
}

// The shards checked: every registered one and every member (ring and the
// ends of migrating ranges), sorted; members are marked.
func TestShardNames(t *testing.T) {
	r, err := ring.Build([]ring.Shard{{Name: "b"}, {Name: "a"}}, ring.Options{VNodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	members, names := shardNames(topology.Topology{Ring: r}, []topology.Shard{{Name: "c"}, {Name: "a"}})
	if want := []string{"a", "b", "c"}; !slices.Equal(names, want) {
		t.Errorf("names %v, want %v", names, want)
	}
	if !members["a"] || !members["b"] || members["c"] {
		t.Errorf("members %v, want a and b", members)
	}
}

// A cutover in transition is named as the operator knows it: the forward
// cutover from its source, a rollback's reverse one the other way.
func TestJournalDescribe(t *testing.T) {
	m := topology.PlannedMove{ID: "m1_1", From: "s1", To: "s2"}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	l := cutover.Last{Step: "fence-source", At: at}
	if got, want := (journalOf{move: m}).describe(l), "the cutover of move m1_1 (s1 → s2), at step fence-source since 02:04:05"; got != want {
		t.Errorf("forward: %q, want %q", got, want)
	}
	if got, want := (journalOf{move: m, reversed: true}).describe(l), "the rollback's reverse cutover of move m1_1 (s2 → s1), at step fence-source since 02:04:05"; got != want {
		t.Errorf("reverse: %q, want %q", got, want)
	}
	if !(journalOf{move: m}).touches("s2") || (journalOf{move: m}).touches("s3") {
		t.Error("touches: want the move's two shards only")
	}
}
