package topoview

import (
	"bytes"
	"testing"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topocheck"
	"github.com/reshard/reshard/topology"
)

// Every case of a shard's line in topology check: skipped; ok with the
// fence accelerated, partly, or not; in transition (its drift as an aside,
// its misplaced and unplaced rows); drift repaired; drift to fix. The
// golden file was printed by cmd/reshard's printChecks before it moved.
func TestPrintChecks(t *testing.T) {
	k := topology.Keyspace{Name: "default", Tables: []tableset.TableSpec{{}, {}}}
	rg := ring.Range{Lo: 1, Hi: 100}
	checks := []topocheck.Shard{
		{Shard: "s1", Skipped: "not in the configuration"},
		{Shard: "s2", Want: fence.Want{Ranges: []ring.Range{rg}, Guard: true, Version: 4}, Have: []fence.Have{{Accelerated: true}, {Accelerated: true}}},
		{Shard: "s3", Want: fence.Want{Version: 4}, Have: []fence.Have{{}, {Accelerated: true}}},
		{Shard: "s4", Want: fence.Want{Version: 4}, Have: []fence.Have{{}}},
		{Shard: "s5", InTransition: []string{"cutover of m1 at step fence"}, Drift: []string{"users: fenced (1,100], want nothing"},
			Strays: []fence.Stray{{Table: "public.users", Rows: 3, Samples: []string{"1", "2"}}}, Unplaced: []tableset.NullKeyRows{{Table: "public.orders", Rows: 1, Samples: []string{"(7)"}}}},
		{Shard: "s6", Drift: []string{"users: guard off, want on"}, Repaired: []string{"public.users"}},
		{Shard: "s7", Drift: []string{"users: guard off, want on"}, Strays: []fence.Stray{{Table: "public.users", Rows: 2, Samples: []string{"5"}}}},
		{Shard: "s8", Unplaced: []tableset.NullKeyRows{{Table: "public.orders", Rows: 4}}},
	}
	var b bytes.Buffer
	PrintChecks(&b, k, checks)
	golden(t, "check.golden", b.String())
}

func TestRecoveryPrinted(t *testing.T) {
	var out bytes.Buffer
	Recovery(&out, rollback.Recovery{MigrationID: "add-x", Keyspace: "default", Version: 7,
		Moves: []rollback.MoveRecovery{{Move: "m1", From: "shard1", To: "shard5", Action: "rolled back"}}})
	want := "move m1 (shard1 → shard5): rolled back\nmigration add-x: ended, topology v7 of keyspace default has no range of it migrating; its slots, publications, origins, holds and guards are gone\n"
	if out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
	out.Reset()
	Recovery(&out, rollback.Recovery{MigrationID: "add-x", Note: "no topology version names it"})
	if out.String() != "migration add-x: nothing left to recover (no topology version names it)\n" {
		t.Errorf("nothing to do: %q", out.String())
	}
}
