package topocheck

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/topology"
)

// On real servers, without the CLI: two shards never fenced drift from
// what topology v1 wants; a check changes nothing, a repair installs the
// fences, and the next check finds no drift. A row planted on the shard
// that does not own its key is a stray, counted and never deleted.
func TestShardsDriftRepairAndStrays(t *testing.T) {
	e := movetest.New(t, "tc1", 10)
	ctx := movetest.Ctx(t)
	k := topology.Keyspace{Name: topology.DefaultKeyspace, KeyType: ring.KeyInt,
		Tables: []tableset.TableSpec{{Table: "items", KeyColumn: "k"}, {Table: "kv", KeyColumn: "k"}}}
	stray := int64(-1)
	for key := int64(1000); stray < 0; key++ {
		if e.Old.Owner(ring.TokenInt64(key)) == "b" {
			stray = key
		}
	}
	e.DBs["a"].Exec(t, "INSERT INTO kv VALUES ($1, 'stray')", stray)
	open := func(context.Context, []string) (map[string]*pgxpool.Pool, func(), error) {
		return map[string]*pgxpool.Pool{"a": e.DBs["a"].Pool, "b": e.DBs["b"].Pool}, func() {}, nil
	}
	check := func(repair bool) []Shard {
		t.Helper()
		got, err := Shards(ctx, Options{Control: e.Fences, Keyspace: k, OpenShards: open, Repair: repair})
		if err != nil {
			t.Fatal(err)
		}
		if names := []string{got[0].Shard, got[1].Shard}; len(got) != 2 || !slices.Equal(names, []string{"a", "b"}) {
			t.Fatalf("checked %v, want shards a and b", got)
		}
		return got
	}

	first := check(false)
	for _, c := range first {
		if !c.Drifting() || len(c.Repaired) > 0 {
			t.Errorf("%s before any fence: drift %v, repaired %v; want drift and nothing repaired", c.Shard, c.Drift, c.Repaired)
		}
	}
	if again := check(false); !again[0].Drifting() {
		t.Errorf("a check without --repair changed shard a: drift now %v", again[0].Drift)
	}
	if s := first[0].Strays; len(s) != 1 || s[0].Table != "public.kv" || s[0].Rows != 1 {
		t.Errorf("shard a strays %+v, want the one planted kv row (key %d)", s, stray)
	}
	if len(first[1].Strays) != 0 {
		t.Errorf("shard b strays %+v, want none", first[1].Strays)
	}

	repaired := check(true)
	for _, c := range repaired {
		if len(c.Repaired) == 0 || !strings.Contains(strings.Join(c.Repaired, ", "), "fence triggers installed") {
			t.Errorf("%s repaired %v, want the fence triggers installed", c.Shard, c.Repaired)
		}
	}
	for _, c := range check(false) {
		if len(c.Drift) > 0 {
			t.Errorf("%s after the repair: drift %v", c.Shard, c.Drift)
		}
		if c.Want.Version != e.Initial.Version {
			t.Errorf("%s wants topology v%d, want v%d", c.Shard, c.Want.Version, e.Initial.Version)
		}
	}
	var rows int
	if err := e.DBs["a"].Pool.QueryRow(ctx, "SELECT count(*) FROM kv WHERE k = $1", stray).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("the stray row: %d rows (%v), want it left in place", rows, err)
	}
}
