package capacity

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/cdc"
)

// probeAt is a move probe whose copy runs at copyRate and whose checksum at
// verifyRate (bytes/s), and whose applier applies 50,000 changes/s.
func probeAt(copyRate, verifyRate float64) MoveProbe {
	return MoveProbe{Table: "public.users", SampleRows: 1000, SampleBytes: int64(copyRate), CopyTime: time.Second,
		VerifyRows: 1000, VerifyBytes: int64(verifyRate), VerifyTime: time.Second, FenceTime: time.Millisecond,
		ApplyChanges: 50_000, ApplyTime: time.Second, ApplyStaged: true}
}

// changesAt is the application's changes to a move's tables: all/s over a
// 2-s window, moving/s of them in the moving ranges.
func changesAt(all, moving float64) ChangeRate {
	n := int64(all * 2)
	return ChangeRate{Window: 2 * time.Second, Inserts: n / 5, Updates: n - 2*(n/5), Deletes: n / 5, Moving: moving}
}

const mib = 1 << 20

func TestPredictFollowsTheCode(t *testing.T) {
	shards := map[string]ShardProbe{
		"shard1": {Shard: "shard1", WALBytesPerSec: 2 * mib, MaxSlotWALKeep: -1, RTT: time.Millisecond},
		"shard5": {Shard: "shard5", MaxSlotWALKeep: -1, RTT: time.Millisecond},
	}
	m := Move{ID: "m1", Source: "shard1", Target: "shard5", Tables: 1, Rows: 1_000_000, Bytes: 600 * mib, IndexBytes: 200 * mib,
		SetBytes: 3000 * mib, Probe: probeAt(10*mib, 60*mib), Changes: changesAt(2000, 400)}
	rep := Predict([]Move{m}, shards, nil, Options{CutoverBudget: 2 * time.Second})
	p := rep.Moves[0]
	if got := p.Copy.Duration(); got != 60*time.Second {
		t.Errorf("copy %s, want 60s (600 MiB at 10 MiB/s)", got)
	}
	// The slot is created before the copy, its stream starts after: 2 MiB/s × 60 s.
	if p.SlotWAL != 120*mib {
		t.Errorf("slot WAL %s, want 120 MiB", HumanBytes(p.SlotWAL))
	}
	// 400 changes/s in the moving ranges, held for the 60 s of the copy:
	// 24,000 changes applied at 50,000/s while 400/s keep coming (the WAL's
	// share at the copy's rate, the rule before, said 2.5 s).
	if got, want := float64(p.CatchUp), 400*60/(50_000-400.0); got < want*0.999 || got > want*1.001 {
		t.Errorf("catch-up %.3fs, want %.3fs", got, want)
	}
	if p.HeldChanges != 24_000 || p.ChangesPerSec != 400 || p.ApplyChangesPerSec != 50_000 {
		t.Errorf("catch-up's basis: %d changes held at %.0f/s, applied at %.0f/s; want 24,000 at 400/s, applied at 50,000/s", p.HeldChanges, p.ChangesPerSec, p.ApplyChangesPerSec)
	}
	if got := p.Verify.Duration(); got != 10*time.Second {
		t.Errorf("verify %s, want 10s (600 MiB at 60 MiB/s)", got)
	}
	if p.TargetGrowth != 800*mib {
		t.Errorf("target growth %s, want 800 MiB (rows and indexes)", HumanBytes(p.TargetGrowth))
	}
	// A fifth of the table, 13 rows a page: 94.5 % of its 3000 MiB of
	// pages touched (TestCleanupWALCountsThePagesTouched).
	if got, want := p.CleanupWAL, int64(3000*mib*(1-math.Pow(0.8, 8192*1e6/(600*mib))))+1_000_000*deleteRecord; got != want {
		t.Errorf("cleanup WAL %s, want %s", HumanBytes(got), HumanBytes(want))
	}
	if want := 2*time.Millisecond + fenceRoundTrips*2*time.Millisecond; p.WritePause.Duration() != want {
		t.Errorf("write pause %s, want %s", p.WritePause.Duration(), want)
	}
	if len(rep.Refusals) != 0 {
		t.Errorf("refused without a budget: %v", rep.Refusals)
	}
	if rep.Shards[0].Shard != "shard1" || rep.Shards[0].PeakSlotWAL != 120*mib || rep.Shards[1].TargetGrowth != 800*mib {
		t.Errorf("shards: %+v", rep.Shards)
	}
}

func TestPredictSharesAShardAndHonoursTheThrottle(t *testing.T) {
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}, "c": {MaxSlotWALKeep: -1}}
	moves := []Move{
		{ID: "m1", Source: "a", Target: "b", Rows: 1000, Bytes: 100 * mib, Probe: probeAt(10*mib, 10*mib)},
		{ID: "m2", Source: "a", Target: "c", Rows: 1000, Bytes: 100 * mib, Probe: probeAt(10*mib, 10*mib)},
	}
	for _, tc := range []struct {
		name         string
		o            Options
		copy, verify time.Duration
	}{
		{"two moves share the source", Options{}, 20 * time.Second, 10 * time.Second},
		{"one at a time on each shard", Options{MaxMovesPerShard: 1}, 10 * time.Second, 10 * time.Second},
		{"a throttle below the shared rate", Options{BytesPerSec: 2 * mib}, 50 * time.Second, 10 * time.Second},
		// 20 rows/s × 100 KiB; verify reads 20 rows/s per side too (it was
		// predicted at the probe's checksum rate: 10 s)
		{"rows/s by the rows' width", Options{RowsPerSec: 20}, 50 * time.Second, 50 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Predict(moves, shards, nil, tc.o)
			if got := rep.Moves[0].Copy.Duration(); got != tc.copy {
				t.Errorf("copy %s, want %s", got, tc.copy)
			}
			if got := rep.Moves[0].Verify.Duration(); got != tc.verify {
				t.Errorf("verify %s, want %s", got, tc.verify)
			}
			if got := rep.Shards[0].PeakSlotWAL; got != int64(tc.copy.Seconds())*mib {
				t.Errorf("peak slot WAL of a %s, want %s", HumanBytes(got), HumanBytes(int64(tc.copy.Seconds())*mib))
			}
		})
	}
}

func TestPredictRefusesWhatCannotFit(t *testing.T) {
	m := Move{ID: "m1", Source: "shard1", Target: "shard5", Rows: 1000, Bytes: 600 * mib, IndexBytes: 100 * mib, Probe: probeAt(10*mib, 10*mib)}
	for _, tc := range []struct {
		name    string
		keep    int64
		budgets map[string]Budget
		refused string // "" fits
		in      []string
	}{
		{"no budget", -1, nil, "", nil},
		{"max_slot_wal_keep_size fits", 200 * mib, nil, "", nil},
		{"max_slot_wal_keep_size overflows", 100 * mib, nil, "shard1/wal",
			[]string{"120.0 MiB", "100.0 MiB (max_slot_wal_keep_size)", "--max-moves-per-shard 1", "at least 120.0 MiB"}},
		{"the configured budget is lower", 200 * mib, map[string]Budget{"shard1": {WALBytes: 64 * mib}}, "shard1/wal",
			[]string{"64.0 MiB (wal_budget_bytes in reshard.yaml)"}},
		{"a configured budget where the server has none", -1, map[string]Budget{"shard1": {WALBytes: 64 * mib}}, "shard1/wal", nil},
		{"disk fits", -1, map[string]Budget{"shard5": {DiskBytes: 1 << 30}}, "", nil},
		{"disk overflows", -1, map[string]Budget{"shard5": {DiskBytes: 512 * mib}}, "shard5/disk",
			[]string{"grows by 700.0 MiB", "gives it 512.0 MiB", "at least 700.0 MiB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shards := map[string]ShardProbe{"shard1": {WALBytesPerSec: 2 * mib, MaxSlotWALKeep: tc.keep}, "shard5": {MaxSlotWALKeep: -1}}
			rep := Predict([]Move{m}, shards, tc.budgets, Options{})
			var got string
			if len(rep.Refusals) > 0 {
				got = rep.Refusals[0].Shard + "/" + rep.Refusals[0].Check
			}
			if got != tc.refused || len(rep.Refusals) > 1 {
				t.Fatalf("refusals %v, want %q", rep.Refusals, tc.refused)
			}
			for _, s := range tc.in {
				if msg := rep.Refusals[0].Error(); !strings.Contains(msg, s) {
					t.Errorf("%q lacks %q", msg, s)
				}
			}
		})
	}
}

func TestPredictWarnsOfACatchUpThatCannotEnd(t *testing.T) {
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	// 60,000 changes/s in the moving ranges against an applier of 50,000/s.
	rep := Predict([]Move{{ID: "m1", Source: "a", Target: "b", Rows: 10, Bytes: mib, SetBytes: mib, Probe: probeAt(10*mib, 10*mib),
		Changes: changesAt(60_000, 60_000)}}, shards, nil, Options{})
	if rep.Moves[0].Converges || rep.Moves[0].CatchUp >= 0 || len(rep.Warnings) != 1 ||
		!strings.Contains(rep.Warnings[0], "about 60000 rows/s in the moving ranges on a, no fewer than the stream applies (50000/s)") {
		t.Fatalf("move %+v, warnings %v: want a catch-up that never ends, said in changes", rep.Moves[0], rep.Warnings)
	}
}

// The catch-up's work is the changes to the moving rows, not the source's
// WAL: at production size (cmd/reshard-bench -sections large, a fifth of
// an 18.93 GiB table, docs/benchmarks.md) the rule of the WAL's share at
// the copy's rate predicted a catch-up of 4h15m against 13 s taken, and a
// busy source's WAL of full-page images said the catch-up would never
// end. The figures here are of that kind: 5.6 MiB/s of WAL, 90 % of it
// images of other rows; the writers' 400 changes/s, 80 of them in the
// fifth that moves; a copy of 3.78 GiB at 3.75 MiB/s (17m11s).
func TestPredictCatchUpCountsChangesNotWAL(t *testing.T) {
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: 5.6 * mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 6_806_587, Bytes: 3870 * mib, SetBytes: 19384 * mib,
		Probe: probeAt(3.75*mib, 60*mib), Changes: changesAt(400, 80)}
	p := Predict([]Move{m}, shards, nil, Options{}).Moves[0]
	held := float64(p.Copy) * 80
	if want := held / (50_000 - 80); !p.Converges || math.Abs(float64(p.CatchUp)-want) > want*0.001 {
		t.Errorf("catch-up %.1fs (converges %v), want %.1fs: %.0f changes held, applied at 50,000/s while 80/s come", float64(p.CatchUp), p.Converges, want, held)
	}
	if p.CatchUp.Duration() > time.Minute {
		t.Errorf("catch-up %s: the bench's took 13 s", p.CatchUp.Duration())
	}
	// The slot's WAL is still the WAL's: 5.6 MiB/s over the copy.
	if want := int64(5.6 * mib * float64(p.Copy)); p.SlotWAL < want-mib || p.SlotWAL > want+mib {
		t.Errorf("slot WAL %s, want %s", HumanBytes(p.SlotWAL), HumanBytes(want))
	}
	// A source whose WAL is all images of pages of other tables, faster
	// than the copy: the stream has few changes to apply, and ends.
	shards["a"] = ShardProbe{WALBytesPerSec: 50 * mib, MaxSlotWALKeep: -1}
	rep := Predict([]Move{m}, shards, nil, Options{})
	if p := rep.Moves[0]; !p.Converges || p.CatchUp <= 0 || p.CatchUp.Duration() > time.Minute || len(rep.Warnings) != 0 {
		t.Errorf("50 MiB/s of WAL, 80 changes/s: catch-up %s, converges %v, warnings %v; want seconds", p.CatchUp.Duration(), p.Converges, rep.Warnings)
	}
	// No writes to the moving ranges: nothing to catch up.
	m.Changes = changesAt(400, 0)
	if p := Predict([]Move{m}, shards, nil, Options{}).Moves[0]; p.CatchUp != 0 || !p.Converges {
		t.Errorf("no changes in the ranges: catch-up %s", p.CatchUp.Duration())
	}
	// Two moves from one source to one target share the applier's rate as
	// they share the copy's.
	m.Changes = changesAt(400, 80)
	m2 := m
	m2.ID = "m2"
	p2 := Predict([]Move{m, m2}, shards, nil, Options{}).Moves[0]
	if p2.ApplyChangesPerSec != 25_000 {
		t.Errorf("two moves at once: the applier at %.0f/s each, want 25,000", p2.ApplyChangesPerSec)
	}
}

// The source's walsender decodes every byte of WAL the slot holds, beside
// the applier: the catch-up is the longer of the two, and a source whose
// WAL comes no slower than it decodes is warned of.
func TestPredictCatchUpIsTheLongerOfApplyAndDecode(t *testing.T) {
	if cdc.DefaultPeekCatchUpBytes != 16*mib {
		t.Fatalf("cdc.DefaultPeekCatchUpBytes is %d: the cases below take 16 MiB", cdc.DefaultPeekCatchUpBytes)
	}
	m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 1_000_000, Bytes: 1000 * mib, SetBytes: 5000 * mib,
		Probe: probeAt(10*mib, 60*mib), Changes: changesAt(2000, 400)} // a 100-s copy
	for _, tc := range []struct {
		name      string
		decode    *DecodeReading
		catchUp   float64
		byDecode  bool
		converges bool
	}{
		{"not measured", nil, 400 * 100 / (50_000 - 400.0), false, true},
		{"slot creation timed out", &DecodeReading{NotMeasured: "no temporary logical slot"}, 400 * 100 / (50_000 - 400.0), false, true},
		// 200 MiB held (2 MiB/s × 100 s), decoded at 102 MiB/s while 2 MiB/s come: 2 s, longer than the applier's 0.82 s.
		{"decoding is the longer", &DecodeReading{Bytes: 102 * mib, Time: time.Second}, 200.0 / 100, true, true},
		// At 1 GiB/s decoding takes 0.2 s: the applier's 0.82 s stands.
		{"applying is the longer", &DecodeReading{Bytes: 1024 * mib, Time: time.Second}, 400 * 100 / (50_000 - 400.0), false, true},
		{"the WAL outruns the decoding", &DecodeReading{Bytes: mib, Time: time.Second}, -1, false, false},
		// Streamed by the walsender at 12 MiB/s (where the SQL peek ran at
		// 102 MiB/s), after a replication connection of 300 ms; the 200 MiB
		// held is more than the stream reads through the walsender
		// (cdc.DefaultPeekCatchUpBytes, 16 MiB): 184 MiB at the SQL rate
		// (less the 2 MiB/s coming), then 0.3 s + 16 MiB / 10 MiB/s.
		{"streamed by the walsender", &DecodeReading{Bytes: 102 * mib, Time: time.Second, StreamBytes: 6 * mib, StreamTime: 500 * time.Millisecond, StreamConnect: 300 * time.Millisecond}, 184.0/100 + 0.3 + 16.0/10, true, true},
		// Not streamed (a plan stored before, or no replication
		// connection): the SQL peek's rate.
		{"not streamed", &DecodeReading{Bytes: 102 * mib, Time: time.Second, StreamNotMeasured: "no replication connection"}, 200.0 / 100, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shards := map[string]ShardProbe{"a": {WALBytesPerSec: 2 * mib, MaxSlotWALKeep: -1, Decode: tc.decode}, "b": {MaxSlotWALKeep: -1}}
			rep := Predict([]Move{m}, shards, nil, Options{})
			p := rep.Moves[0]
			if math.Abs(float64(p.CatchUp)-tc.catchUp) > math.Abs(tc.catchUp)*0.001 || p.DecodeBound != tc.byDecode || p.Converges != tc.converges {
				t.Errorf("catch-up %.3fs (by decoding %v, converges %v), want %.3fs (%v, %v)", float64(p.CatchUp), p.DecodeBound, p.Converges, tc.catchUp, tc.byDecode, tc.converges)
			}
			if streamed := tc.decode.StreamRate() > 0; p.DecodeStreamed != streamed || streamed && p.DecodePeekedBytes != 184*mib {
				t.Errorf("decoding streamed %v (%d bytes peeked), want %v (184 MiB peeked)", p.DecodeStreamed, p.DecodePeekedBytes, streamed)
			}
			if warned := len(rep.Warnings) > 0; warned == tc.converges || warned && !strings.Contains(rep.Warnings[0], "writes 2.0 MiB/s of WAL, no slower than it decodes it (1.0 MiB/s)") {
				t.Errorf("warnings %v", rep.Warnings)
			}
		})
	}
}

// A move without a measured change rate (a probe that read no
// pg_stat_user_tables) or applier gets no catch-up figure, and says so.
func TestPredictSaysWhatItDidNotMeasure(t *testing.T) {
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 1000, Bytes: 10 * mib, SetBytes: 50 * mib, Probe: probeAt(10*mib, 60*mib)}
	rep := Predict([]Move{m}, shards, nil, Options{})
	if rep.Moves[0].CatchUp != 0 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "no change rate") ||
		!strings.Contains(rep.Moves[0].Basis, "catch-up: the changes to its tables not measured") {
		t.Errorf("no change rate: catch-up %v, warnings %v, basis %q", rep.Moves[0].CatchUp, rep.Warnings, rep.Moves[0].Basis)
	}
	m.Changes = changesAt(100, 20)
	m.Probe.ApplyChanges, m.Probe.ApplyTime = 0, 0
	rep = Predict([]Move{m}, shards, nil, Options{})
	if rep.Moves[0].CatchUp != 0 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "did not time the applier") {
		t.Errorf("no applier: catch-up %v, warnings %v", rep.Moves[0].CatchUp, rep.Warnings)
	}
}

// The basis names the catch-up's measures; a stored report of before them
// still decodes, and one of now keeps them.
func TestCatchUpBasisAndStoredReports(t *testing.T) {
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 1000, Bytes: 10 * mib, SetBytes: 50 * mib, Probe: probeAt(10*mib, 60*mib), Changes: changesAt(100, 20)}
	rep := Predict([]Move{m}, shards, nil, Options{})
	for _, want := range []string{"catch-up: 20 row changes/s in the moving ranges, of 100/s to its tables (40 inserts, 120 updates, 40 deletes over the 2s WAL window",
		"50000 applied as the stream applies them (staged, to the copied rows, rolled back) in 1s (50000/s)"} {
		if !strings.Contains(rep.Moves[0].Basis, want) {
			t.Errorf("basis %q lacks %q", rep.Moves[0].Basis, want)
		}
	}
	var b strings.Builder
	WriteText(&b, rep)
	if want := "m: catch-up: 20 row changes held (20/s in the moving ranges while the slot holds them), applied at 50000/s while they keep coming: 0s"; !strings.Contains(b.String(), want) {
		t.Errorf("plan's text lacks %q:\n%s", want, b.String())
	}
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || back.Moves[0].HeldChanges != rep.Moves[0].HeldChanges || back.Moves[0].ApplyChangesPerSec != 50_000 {
		t.Errorf("stored and read back: %v, %+v", err, back.Moves)
	}
	// A report stored before the catch-up was counted in changes.
	old := `{"moves":[{"id":"m1","source":"a","target":"b","copy_bytes_per_sec":1048576,"copy_seconds":60,"catch_up_seconds":2.5,"verify_seconds":10,"cleanup_seconds":10,"write_pause_seconds":0.01,"slot_wal_bytes":125829120,"target_growth_bytes":1,"cleanup_wal_bytes":1,"basis":"b","converges":true}],"shards":[{"shard":"a","wal_bytes_per_sec":1,"peak_slot_wal_bytes":1,"wal_budget_bytes":-1,"target_growth_bytes":0}],"probes":[{"shard":"a","wal_bytes_per_sec":1,"wal_window":2000000000,"wal":{},"max_slot_wal_keep_size":-1,"max_wal_size":1,"rtt":1}]}`
	var stored Report
	if err := json.Unmarshal([]byte(old), &stored); err != nil || stored.Moves[0].CatchUp != 2.5 || stored.Moves[0].HeldChanges != 0 || len(stored.Probes[0].Tables) != 0 {
		t.Errorf("an old stored report: %v, %+v", err, stored)
	}
	if js, _ := json.Marshal(MovePrediction{}); strings.Contains(string(js), "changes") {
		t.Errorf("zero new fields are stored: %s", js)
	}
}

// With the stream running during the copy (the copy gate), the slot's
// predicted WAL is StreamRetention's, whatever the copy's length, and the
// catch-up drains only that; without it, it grows with the copy.
func TestPredictStreamDuringCopyBoundsTheSlot(t *testing.T) {
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: 2 * mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	for _, gb := range []int64{1, 10, 100} { // copies of 100 s, 1,000 s, 10,000 s at 10 MiB/s
		m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 1000, Bytes: gb * 1000 * mib, SetBytes: gb * 5000 * mib, Probe: probeAt(10*mib, 60*mib),
			Changes: changesAt(2000, 400)}
		after := Predict([]Move{m}, shards, nil, Options{StreamDuringCopy: true}).Moves[0]
		before := Predict([]Move{m}, shards, nil, Options{}).Moves[0]
		if want := int64(2 * mib * StreamRetention.Seconds()); after.SlotWAL != want {
			t.Errorf("%d GB, stream during the copy: slot WAL %s, want %s", gb, HumanBytes(after.SlotWAL), HumanBytes(want))
		}
		if want := int64(2*mib) * int64(before.Copy); before.SlotWAL != want {
			t.Errorf("%d GB, stream after the copy: slot WAL %s, want %s (2 MiB/s × %.0f s)", gb, HumanBytes(before.SlotWAL), HumanBytes(want), float64(before.Copy))
		}
		// 400 changes/s held for StreamRetention, applied at 50,000/s.
		if got, want := float64(after.CatchUp), 400*StreamRetention.Seconds()/(50_000-400); got < want*0.999 || got > want*1.001 {
			t.Errorf("%d GB: catch-up %.3fs, want %.3fs", gb, got, want)
		}
	}
	// A copy shorter than StreamRetention keeps no more than its own WAL.
	m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 1000, Bytes: 50 * mib, Probe: probeAt(10*mib, 60*mib)}
	if got := Predict([]Move{m}, shards, nil, Options{StreamDuringCopy: true}).Moves[0].SlotWAL; got != 10*mib {
		t.Errorf("a 5 s copy: slot WAL %s, want 10 MiB", HumanBytes(got))
	}
}

// The cleanup deletes the moving rows where they lie: spread by their token
// over every page of the table, each page's first delete after a checkpoint
// writing a full-page image. cmd/reshard-bench -sections large measured
// 642.5 MiB of WAL (its writers' share included) deleting a fifth of a
// 0.93 GiB table, 334,939 rows of 596 bytes; the moving bytes alone
// predicted 213.9 MiB.
func TestCleanupWALCountsThePagesTouched(t *testing.T) {
	measured := Move{Rows: 334_939, Bytes: 195 * mib, SetBytes: 952 * mib}
	// An upper bound, within 1.5× of the measure (TOAST pages, which hold
	// a few long values, are counted as if they held rows of the average
	// width).
	if got := cleanupWAL(measured); got < 642*mib || got > 642*mib*3/2 {
		t.Errorf("a fifth of a 0.93 GiB table: cleanup WAL predicted %s, measured 642.5 MiB", HumanBytes(got))
	}
	// The whole table: every page once, as before.
	whole := Move{Rows: 1000, Bytes: 100 * mib, SetBytes: 100 * mib}
	if got, want := cleanupWAL(whole), int64(100*mib+1000*deleteRecord); got != want {
		t.Errorf("the whole table: %s, want %s", HumanBytes(got), HumanBytes(want))
	}
	// Rows of three pages each (TOAST): their own pages, no fewer.
	wide := Move{Rows: 1000, Bytes: 1000 * 3 * pageSize, SetBytes: 1000 * 3 * pageSize * 10}
	if got, want := cleanupWAL(wide), int64(1000*3*pageSize)+1000*deleteRecord; got != want {
		t.Errorf("wide rows: %s, want %s", HumanBytes(got), HumanBytes(want))
	}
	if got := cleanupWAL(Move{}); got != 0 {
		t.Errorf("nothing moves: %d", got)
	}
}

func TestMeasuredPredictsFromTheCopysOwnRate(t *testing.T) {
	shards := map[string]ShardProbe{"a": {Shard: "a", WALBytesPerSec: mib, MaxSlotWALKeep: -1}, "b": {Shard: "b", MaxSlotWALKeep: -1}}
	// The probe said 1 MiB/s; the copy did a tenth (100,000 of 1,000,000
	// rows, 60 MiB of 600) in 12 s: 5 MiB/s, 120 s in all.
	m := Move{ID: "m", Source: "a", Target: "b", Rows: 1_000_000, Bytes: 600 * mib, SetBytes: 3000 * mib, Probe: probeAt(mib, 60*mib)}
	if got := Predict([]Move{m}, shards, nil, Options{}).Moves[0].Copy.Duration(); got != 600*time.Second {
		t.Fatalf("at the start: copy %s, want 10m0s", got)
	}
	p := Predict([]Move{m.Measured(100_000, 12*time.Second)}, shards, nil, Options{}).Moves[0]
	if got := p.Copy.Duration(); got != 120*time.Second {
		t.Errorf("at a tenth: copy %s, want 2m0s (the copy's own 5 MiB/s)", got)
	}
	if p.SlotWAL != 120*mib || p.Verify.Duration() != 10*time.Second {
		t.Errorf("at a tenth: slot WAL %s (want 120 MiB), verify %s (want the probe's 10s)", HumanBytes(p.SlotWAL), p.Verify.Duration())
	}
	if same := m.Measured(0, time.Second); same.Probe != m.Probe {
		t.Errorf("nothing copied yet changed the probe: %+v", same.Probe)
	}
}

// TestPredictTakesTheVerifyAtThePairsRate: a probe that read both sides
// predicts the verify (and the cleanup) at the rate the pair achieved, a
// side's bytes over the pair's time, and its basis says which sides were
// read and each one's rate; a plan stored before, with the source alone,
// still decodes and predicts from the source's rate.
func TestPredictTakesTheVerifyAtThePairsRate(t *testing.T) {
	shards := map[string]ShardProbe{"a": {Shard: "a", MaxSlotWALKeep: -1}, "b": {Shard: "b", MaxSlotWALKeep: -1}}
	pr := probeAt(10*mib, 0)
	// 60 MiB a side in 2 s: the source busy all of it, the target half.
	pr.VerifyRows, pr.VerifyBytes, pr.VerifyTime, pr.VerifyWorkers = 6000, 60*mib, 2*time.Second, 2
	pr.VerifyTargetRows, pr.VerifyTargetBytes = 6000, 60*mib
	pr.VerifySourceBusy, pr.VerifyTargetBusy = 2*time.Second, time.Second
	m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 60_000, Bytes: 600 * mib, Probe: pr}
	p := Predict([]Move{m}, shards, nil, Options{}).Moves[0]
	if p.Verify.Duration() != 20*time.Second || p.Cleanup.Duration() != 20*time.Second {
		t.Errorf("verify %s, cleanup %s: want 20s each (600 MiB at the pair's 30 MiB/s a side)", p.Verify.Duration(), p.Cleanup.Duration())
	}
	for _, want := range []string{"both sides at once (2 workers a side)", "6000 rows on a (busy 2s, 30.0 MiB/s)", "6000 of the copied rows on b (busy 1s, 60.0 MiB/s)", "in 2s (30.0 MiB/s a side)"} {
		if !strings.Contains(p.Basis, want) {
			t.Errorf("basis %q: want %q", p.Basis, want)
		}
	}

	b, err := json.Marshal(m.Probe)
	if err != nil {
		t.Fatal(err)
	}
	var back MoveProbe
	if err := json.Unmarshal(b, &back); err != nil || back != m.Probe {
		t.Errorf("the probe through JSON: %+v, %v; want %+v", back, err, m.Probe)
	}
	// A plan stored before (stop 40's MoveProbe: no target fields).
	old := `{"table":"public.users","sample_rows":1000,"sample_bytes":10485760,"copy_time":1000000000,"verify_rows":6000,"verify_bytes":62914560,"verify_time":1000000000,"verify_workers":2,"load":{"source_active":0,"target_active":0},"fence_time":1000000}`
	var om Move
	om, om.Probe = m, MoveProbe{}
	if err := json.Unmarshal([]byte(old), &om.Probe); err != nil {
		t.Fatal(err)
	}
	p = Predict([]Move{om}, shards, nil, Options{}).Moves[0]
	if p.Verify.Duration() != 10*time.Second || !strings.Contains(p.Basis, "6000 checksummed as the verify does on a alone (2 workers) in 1s (60.0 MiB/s)") {
		t.Errorf("a stored plan: verify %s (want 10s: 600 MiB at the source's 60 MiB/s), basis %q", p.Verify.Duration(), p.Basis)
	}
}

// The cleanup is its three probed parts: the moving rows found among the
// source's at the search's rate, deleted at the delete's, and the images of
// the pages they are deleted from written at the source's rate of
// page-sized WAL; without the probes (a plan stored before), the verify's
// rate; no faster than the throttle's rows per second.
func TestPredictCleanupFromItsProbes(t *testing.T) {
	shards := map[string]ShardProbe{"a": {MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	pr := probeAt(10*mib, 60*mib)
	pr.CleanupFindRows, pr.CleanupFindTime = 50_000, time.Second // 50,000 rows/s
	pr.CleanupDeleteRows, pr.CleanupDeleteTime = 20_000, 100*time.Millisecond
	pr.ImageBytes, pr.ImageTime = 32*mib, 200*time.Millisecond // 160 MiB/s
	// A fifth of a table of 100 rows a page: 1 − 0.8^100 of its pages.
	m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 1_000_000, Bytes: 1_000_000 * pageSize / 100, SetBytes: 5_000_000 * pageSize / 100, Probe: pr}
	p := Predict([]Move{m}, shards, nil, Options{}).Moves[0]
	pages := float64(5_000_000/100) * (1 - math.Pow(0.8, 100))
	want := 1_000_000/50_000.0 + 1_000_000/200_000.0 + pages*pageSize/(160*mib)
	if got := float64(p.Cleanup); math.Abs(got-want) > 0.01 {
		t.Errorf("cleanup %.3fs, want %.3fs (find %.3f, delete %.3f, images %.3f)", got, want, float64(p.CleanupFind), float64(p.CleanupDelete), float64(p.CleanupImages))
	}
	if float64(p.CleanupFind) != 20 || float64(p.CleanupDelete) != 5 {
		t.Errorf("find %v, delete %v: want 20 s and 5 s", p.CleanupFind, p.CleanupDelete)
	}
	if got := Predict([]Move{m}, shards, nil, Options{RowsPerSec: 10_000}).Moves[0].Cleanup; got != 100 {
		t.Errorf("throttled to 10,000 rows/s: cleanup %v, want 100 s", got)
	}
	var b strings.Builder
	WriteText(&b, Report{Moves: []MovePrediction{p}})
	if want := "m: cleanup: finding the moved rows among the source's 20s, deleting them 5s, writing their pages' full-page images"; !strings.Contains(b.String(), want) {
		t.Errorf("plan's text lacks %q:\n%s", want, b.String())
	}
	if want := "cleanup: 50000 moving rows found on the source by its batches' search (read only) in 1s (50000/s), 20000 of the copied rows deleted by ctid on the target (rolled back) in 100ms (200000/s), 32.0 MiB of page-sized WAL"; !strings.Contains(p.Basis, want) {
		t.Errorf("basis %q lacks %q", p.Basis, want)
	}
	// Not probed (a stored plan's probe, or the images not timed): the
	// verify's rate, as before.
	for _, miss := range []func(*MoveProbe){
		func(p *MoveProbe) { p.CleanupFindRows = 0 },
		func(p *MoveProbe) { p.ImageBytes, p.ImageTime, p.ImageNotMeasured = 0, 0, "permission denied" },
	} {
		old := m
		miss(&old.Probe)
		p := Predict([]Move{old}, shards, nil, Options{}).Moves[0]
		if want := float64(old.Bytes) / (60 * mib); math.Abs(float64(p.Cleanup)-want) > 1e-9 || p.CleanupFind != 0 {
			t.Errorf("not probed: cleanup %v (find %v), want the verify's rate's %.3fs", p.Cleanup, p.CleanupFind, want)
		}
		if !strings.Contains(p.Basis, "verify's rate") {
			t.Errorf("not probed: basis %q does not say the verify's rate", p.Basis)
		}
	}
	var back MoveProbe
	if err := json.Unmarshal([]byte(`{"table":"t","sample_rows":1,"sample_bytes":1,"copy_time":1,"verify_rows":1,"verify_bytes":1,"verify_time":1,"load":{"source_active":0,"target_active":0},"fence_time":1}`), &back); err != nil || back.CleanupFindRows != 0 {
		t.Errorf("a probe stored before: %v, %+v", err, back)
	}
	if js, _ := json.Marshal(MovePrediction{}); strings.Contains(string(js), "cleanup_find") {
		t.Errorf("zero new fields are stored: %s", js)
	}
}
