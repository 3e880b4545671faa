package capacity

import (
	"math"
	"strings"
	"testing"
	"time"
)

// probeAt is a move probe whose copy runs at copyRate and whose checksum at
// verifyRate (bytes/s).
func probeAt(copyRate, verifyRate float64) MoveProbe {
	return MoveProbe{Table: "public.users", SampleRows: 1000, SampleBytes: int64(copyRate), CopyTime: time.Second,
		VerifyRows: 1000, VerifyBytes: int64(verifyRate), VerifyTime: time.Second, FenceTime: time.Millisecond}
}

const mib = 1 << 20

func TestPredictFollowsTheCode(t *testing.T) {
	shards := map[string]ShardProbe{
		"shard1": {Shard: "shard1", WALBytesPerSec: 2 * mib, MaxSlotWALKeep: -1, RTT: time.Millisecond},
		"shard5": {Shard: "shard5", MaxSlotWALKeep: -1, RTT: time.Millisecond},
	}
	m := Move{ID: "m1", Source: "shard1", Target: "shard5", Tables: 1, Rows: 1_000_000, Bytes: 600 * mib, IndexBytes: 200 * mib,
		SetBytes: 3000 * mib, Probe: probeAt(10*mib, 60*mib)}
	rep := Predict([]Move{m}, shards, nil, Options{CutoverBudget: 2 * time.Second})
	p := rep.Moves[0]
	if got := p.Copy.Duration(); got != 60*time.Second {
		t.Errorf("copy %s, want 60s (600 MiB at 10 MiB/s)", got)
	}
	// The slot is created before the copy, its stream starts after: 2 MiB/s × 60 s.
	if p.SlotWAL != 120*mib {
		t.Errorf("slot WAL %s, want 120 MiB", HumanBytes(p.SlotWAL))
	}
	// The moving ranges take 600/3000 of the writes (0.4 MiB/s): 24 MiB of
	// changes applied at 10 MiB/s while 0.4 MiB/s keep coming.
	if got, want := float64(p.CatchUp), 0.4*60/(10-0.4); got < want*0.999 || got > want*1.001 {
		t.Errorf("catch-up %.3fs, want %.3fs", got, want)
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
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: 20 * mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	rep := Predict([]Move{{ID: "m1", Source: "a", Target: "b", Rows: 10, Bytes: mib, SetBytes: mib, Probe: probeAt(10*mib, 10*mib)}}, shards, nil, Options{})
	if rep.Moves[0].Converges || rep.Moves[0].CatchUp >= 0 || len(rep.Warnings) != 1 {
		t.Fatalf("move %+v, warnings %v: want a catch-up that never ends, said", rep.Moves[0], rep.Warnings)
	}
}

// With the stream running during the copy (the copy gate), the slot's
// predicted WAL is StreamRetention's, whatever the copy's length, and the
// catch-up drains only that; without it, it grows with the copy.
func TestPredictStreamDuringCopyBoundsTheSlot(t *testing.T) {
	shards := map[string]ShardProbe{"a": {WALBytesPerSec: 2 * mib, MaxSlotWALKeep: -1}, "b": {MaxSlotWALKeep: -1}}
	for _, gb := range []int64{1, 10, 100} { // copies of 100 s, 1,000 s, 10,000 s at 10 MiB/s
		m := Move{ID: "m", Source: "a", Target: "b", Tables: 1, Rows: 1000, Bytes: gb * 1000 * mib, SetBytes: gb * 5000 * mib, Probe: probeAt(10*mib, 60*mib)}
		after := Predict([]Move{m}, shards, nil, Options{StreamDuringCopy: true}).Moves[0]
		before := Predict([]Move{m}, shards, nil, Options{}).Moves[0]
		if want := int64(2 * mib * StreamRetention.Seconds()); after.SlotWAL != want {
			t.Errorf("%d GB, stream during the copy: slot WAL %s, want %s", gb, HumanBytes(after.SlotWAL), HumanBytes(want))
		}
		if want := int64(2*mib) * int64(before.Copy); before.SlotWAL != want {
			t.Errorf("%d GB, stream after the copy: slot WAL %s, want %s (2 MiB/s × %.0f s)", gb, HumanBytes(before.SlotWAL), HumanBytes(want), float64(before.Copy))
		}
		// 1/5 of 2 MiB/s comes in while 10 MiB/s applies: 0.4 × 20 / 9.6 s.
		if got, want := float64(after.CatchUp), 0.4*StreamRetention.Seconds()/(10-0.4); got < want*0.999 || got > want*1.001 {
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
