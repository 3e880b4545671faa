package topoview

import (
	"bytes"
	"testing"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topocheck"
	"github.com/reshard/reshard/topology"
)

// topology check's ended migrations, notes and objects left behind, and
// check placement's lines. The golden files were printed by cmd/reshard's
// printEnded and printPlacement before they moved.
func TestPrintEndedAndPlacement(t *testing.T) {
	var b bytes.Buffer
	PrintEnded(&b, []topocheck.EndedMigration{{Migration: "add-s5", Workflow: "terminated in CUTOVER", Moves: 2, Migrating: 3, Fix: "reshard recover add-s5"}},
		[]string{"migration m9 has 1 move(s) not ended; Temporal cannot say whether its workflow runs (deadline)"},
		[]topocheck.Leftover{
			{Shard: "shard1", Object: cdc.Object{Kind: "slot", Name: "reshard_m1", Active: true}, Move: "m1", Migration: "add-s5", Fix: "reshard recover add-s5"},
			{Shard: "shard2", Object: cdc.Object{Kind: "slot", Name: "reshard_m2"}, Move: "m2", Migration: "add-s5", Fix: "reshard recover add-s5"},
			{Shard: "shard3", Object: cdc.Object{Kind: "publication", Name: "reshard_x"}, Fix: "no stored plan names its move: drop it"},
		})
	golden(t, "ended.golden", b.String())
	b.Reset()
	k := topology.Keyspace{Name: "accts", Tables: []tableset.TableSpec{{}, {}}}
	for _, r := range []topocheck.Placement{
		{Keyspace: "accts", Of: k, Version: 7, RunningMoves: 2, Shards: []topocheck.PlacementOfShard{
			{Shard: "s1", Skipped: "not in the configuration"},
			{Shard: "s2"},
			{Shard: "s3", Strays: []fence.Stray{{Table: "public.users", Rows: 3, Samples: []string{"1", "2"}}}, Unplaced: []tableset.NullKeyRows{{Table: "public.orders", Rows: 1, Samples: []string{"(7)"}}}},
		}},
		{Keyspace: "accts", Of: k, Version: 8, Shards: []topocheck.PlacementOfShard{{Shard: "s4"}}},
	} {
		PrintPlacement(&b, r)
	}
	golden(t, "placement.golden", b.String())
}
