package topoview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// The golden files were printed by cmd/reshard's own functions before they
// moved here (printTopology, topologyJSON, printSkew, printRingPlan): the
// commands' output is unchanged.

func fixture(t *testing.T) (*ring.Ring, topology.Topology, []topology.Shard) {
	t.Helper()
	r, err := ring.Build([]ring.Shard{{Name: "a"}, {Name: "b"}, {Name: "c"}}, ring.Options{VNodes: 4, Tokens: ring.AllocBalanced})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := topology.New(r, []topology.RangeState{{Range: r.Ranges("a")[0], Owner: "a", Status: topology.Migrating, From: "a", To: "d"}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	tp.Version, tp.CreatedAt, tp.MigrationID = 7, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "m1"
	reg := []topology.Shard{{Name: "a", Weight: 1, Conn: topology.ConnRef{Host: "h", Port: 5432, Database: "d", User: "u"}, FailureDomain: "z1"}, {Name: "d", Weight: 2}}
	return r, tp, reg
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	want, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestPrintTopologyAndJSON(t *testing.T) {
	r, tp, reg := fixture(t)
	plain, err := topology.New(r, nil, "plain")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		tp  topology.Topology
		reg []topology.Shard
	}{{tp, reg}, {plain, nil}} {
		var b bytes.Buffer
		PrintTopology(&b, c.tp, c.reg)
		golden(t, fmt.Sprintf("topology%d.golden", i), b.String())
		j, err := json.Marshal(VersionOf(c.tp, c.reg))
		if err != nil {
			t.Fatal(err)
		}
		golden(t, fmt.Sprintf("topology%d.json.golden", i), string(j))
	}
}

// A registered shard the ring does not name (a joining one) is listed
// after the ring's shards, with its state in the version shown.
func TestShardRows(t *testing.T) {
	_, tp, reg := fixture(t)
	rows := topology.ShardRows(tp, reg)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %s %d %.4f %g", r.Name, r.State, r.VNodes, r.Space, r.Weight))
	}
	want := []string{"a active 4 0.3333 1", "b active 4 0.3333 0", "c active 4 0.3333 0", "d joining 0 0.0000 2"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("rows %q, want %q", got, want)
	}
}

func TestPrintSkew(t *testing.T) {
	_, tp, _ := fixture(t)
	rep := &topology.SkewReport{Version: 3, Interval: 5 * time.Second,
		Shards: []topology.ShardFigures{{Shard: "a", Space: 0.5, Rows: 10, Bytes: 123456, WritesPerSec: 1.5, ForeignRows: 2}, {Shard: "b", Space: 0.5, Rows: 0, Bytes: 10}},
		Rows:   topology.Imbalance{Hottest: "a", Ratio: math.Inf(1)}, Bytes: topology.Imbalance{Ratio: 1.2345},
		HotRanges: []topology.RangeFigures{{Range: tp.Migrating()[0].Range, Shard: "a", Rows: 10, RowShare: 0.9, SpaceShare: 0.1}}}
	var b bytes.Buffer
	PrintSkew(&b, rep)
	golden(t, "skew.golden", b.String())
	rep.HotRanges = nil
	b.Reset()
	PrintSkew(&b, rep)
	if strings.Contains(b.String(), "hottest ranges") || !strings.HasSuffix(b.String(), "writes  0.00            -\n") {
		t.Errorf("no hot ranges: the table of ranges is left out, got\n%s", b.String())
	}
}

func TestPrintRingPlan(t *testing.T) {
	r, _, _ := fixture(t)
	o := ring.Options{VNodes: 4, Tokens: ring.AllocBalanced}
	rc := ring.Change{Kind: "rebalance", Add: []string{"x", "y"}, Remove: []string{"a"}, Opts: o}
	_, moves, err := ring.PlanChange(r, nil, rc)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := ring.PlanSteps(r, rc.Target(), o)
	if err != nil {
		t.Fatal(err)
	}
	for _, js := range []bool{false, true} {
		for _, st := range [][][]ring.Move{steps, nil} {
			var b bytes.Buffer
			if err := PrintRingPlan(&b, moves, st, o, js); err != nil {
				t.Fatal(err)
			}
			golden(t, fmt.Sprintf("plan-json=%v-steps=%d.golden", js, len(st)), b.String())
		}
	}
}

func TestPrintRing(t *testing.T) {
	_, tp, reg := fixture(t)
	var b bytes.Buffer
	PrintRing(&b, tp, reg, true)
	want := `topology version 7: 3 shards, 12 vnodes

SHARD  VNODES  RANGES  SPACE   WEIGHT
a      4       4       33.33%  1
b      4       4       33.33%  -
c      4       4       33.33%  -

ranges (lo exclusive, hi inclusive):
RANGE                                        SHARD  STATE
`
	if !strings.HasPrefix(b.String(), want) {
		t.Fatalf("got\n%s\nwant it to begin with\n%s", b.String(), want)
	}
	lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(b.String(), want), "\n"), "\n")
	if len(lines) != 12 || !strings.Contains(lines[0], " a      migrating a->d") || !strings.HasSuffix(lines[1], "b      stable") {
		t.Errorf("ranges: %q; want 12, the first migrating a->d", lines)
	}
	b.Reset()
	PrintRing(&b, tp, reg, false)
	if strings.Contains(b.String(), "ranges (") {
		t.Errorf("without ranges: %s", b.String())
	}
}

func TestPrintHistory(t *testing.T) {
	var b bytes.Buffer
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := PrintHistory(&b, []topology.HistoryEntry{{Version: 2, Reason: "add-node", MigrationID: "m1", CreatedAt: at, Shards: 3, VNodes: 48, Migrating: 4}, {Version: 1, Reason: "init", CreatedAt: at, Shards: 2, VNodes: 32}}); err != nil {
		t.Fatal(err)
	}
	want := `VERSION  CREATED               SHARDS  VNODES  MIGRATING  MIGRATION  REASON
2        2026-01-02T03:04:05Z  3       48      4          m1         add-node
1        2026-01-02T03:04:05Z  2       32      0          -          init
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestPrintSimulation(t *testing.T) {
	o := ring.SimOptions{Shards: 4, Add: 1, VNodes: 16, Keys: 1000, Algos: []string{"modulo", "jump"}}
	res, err := ring.Simulate(o)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := PrintSimulation(&b, o, res, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || lines[0] != "4 shards + 1, 1000 keys, ideal moved fraction 0.2000" || !strings.HasPrefix(lines[1], "ALGO") || !strings.HasPrefix(lines[2], "modulo") || !strings.HasPrefix(lines[3], "jump") {
		t.Errorf("got\n%s", b.String())
	}
}
