package topoview

import (
	"bytes"
	"testing"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
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
