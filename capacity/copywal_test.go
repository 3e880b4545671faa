package capacity

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// section20GB is the source's reading by ProbeShard in cmd/reshard-bench
// -sections large -large-gb 20 (2026-12-04 02:37 to 02:51 UTC,
// on 9e74412): a window of 30 s from 57 s after a checkpoint (the
// source's restart after the load), 87 % of its WAL full-page images
// dying away with an e-folding time of 40 s under the router writers;
// checkpoint_timeout 10 min, max_wal_size 4 GB. Parts: records, images,
// bytes.
var section20GB = reading(30000396801, 82314752, 86774584000, [][3]int64{
	{2039, 350, 2926878}, {2532, 455, 3788028}, {1776, 258, 2197171}, {2668, 445, 3724948}, {2504, 419, 3519247}, {2576, 381, 3234480},
	{3079, 500, 4201892}, {2621, 357, 3059408}, {2673, 383, 3265664}, {3050, 419, 3580060}, {2391, 354, 3006163}, {2625, 344, 2968203},
	{2720, 360, 3100288}, {2853, 351, 3047559}, {2472, 268, 2360477}, {2660, 289, 2552347}, {2578, 288, 2530153}, {2728, 312, 2733462},
	{2769, 351, 3027482}, {2958, 383, 3304351}, {2611, 259, 2319213}, {2758, 266, 2384933}, {2658, 234, 2136062}, {2561, 262, 2337852},
	{2468, 241, 2161284}, {2534, 201, 1872967}, {2446, 231, 2084782}, {2354, 208, 1901590}, {2156, 162, 1522322}, {2510, 184, 1736617}})

// section20GBTenth is the same run's reading of its copy's first tenth
// (WALMeter, a part a second), 2m21s after the checkpoint at its end.
var section20GBTenth = reading(17323423298, 10860400, 141337742000, [][3]int64{
	{1942, 60, 712392}, {1879, 60, 717374}, {2116, 63, 781767}, {1948, 40, 574975}, {2206, 62, 781913}, {1919, 30, 500534},
	{2150, 65, 794717}, {2109, 33, 548826}, {1974, 28, 489177}, {1855, 32, 503225}, {1888, 41, 578806}, {2119, 44, 638345},
	{1918, 61, 731645}, {1970, 59, 727472}, {1919, 29, 492078}, {1958, 30, 503099}, {1909, 21, 429288}, {650, 28, 304608}})

func reading(window, lsnBytes, since int64, parts [][3]int64) WALReading {
	r := WALReading{Window: time.Duration(window), Bytes: lsnBytes, SinceCheckpoint: time.Duration(since),
		CheckpointTimeout: 10 * time.Minute, MaxWALSize: 4 << 30}
	for _, p := range parts {
		r.Parts = append(r.Parts, WALPart{Records: p[0], FPI: p[1], Bytes: p[2]})
		r.Records += p[0]
		r.FPI += p[1]
		r.StatBytes += p[2]
	}
	return r
}

func TestCopyWALTakesTheImagesOfTheCopysOwnSpanOfTheCycle(t *testing.T) {
	// 2,500 records/s of 140 B (±15 % from second to second), and after
	// a checkpoint 1,800 images/s of
	// 7,500 B dying away with an e-folding time of 40 s, a 600-s cycle.
	// The window is 57 to 87 s after the checkpoint; the copy starts 37 s
	// after it and lasts 140 s (section large's at 20 GB).
	const (
		recs, recBytes = 2500.0, 140.0
		img0, imgBytes = 1800.0, 7500.0
		tau            = 40.0
	)
	images := func(a, b float64) float64 { return img0 * tau * (math.Exp(-a/tau) - math.Exp(-b/tau)) } // images in [a, b)
	r := WALReading{Window: 30 * time.Second, SinceCheckpoint: 87 * time.Second, CheckpointTimeout: 600 * time.Second, MaxWALSize: 4 << 30}
	for i := range 30 {
		p := WALPart{Records: int64(recs * (1 + 0.15*float64(i%3-1))), FPI: int64(math.Round(images(57+float64(i), 58+float64(i))))}
		p.Bytes = p.Records*recBytes + p.FPI*imgBytes
		r.Parts = append(r.Parts, p)
		r.Records += p.Records
		r.FPI += p.FPI
		r.StatBytes += p.Bytes
	}
	r.Bytes = r.StatBytes
	want := recs*recBytes*140 + images(124, 264)*imgBytes
	got := r.CopyWAL(37*time.Second, 140*time.Second)
	old := r.SteadyRate() * 140
	t.Logf("window %s/s (%.0f %% images), steady %s/s; a copy from 124 s to 264 s after the checkpoint: %s predicted for %s (%+.1f %%), the cycle's rate × the copy %s (%+.0f %%)",
		HumanBytes(int64(r.RawRate())), 100*r.FPIShare(), HumanBytes(int64(r.SteadyRate())), HumanBytes(int64(got)), HumanBytes(int64(want)), 100*(got/want-1),
		HumanBytes(int64(old)), 100*(old/want-1))
	if got < want*0.95 || got > want*1.05 {
		t.Errorf("WAL over the copy %.0f B, want %.0f ±5 %% (the cycle's rate × the copy gives %.0f)", got, want, old)
	}
	// A copy of many cycles meets every cycle's images: the cycle's rate.
	long := 100 * r.CheckpointTimeout
	if got, want := r.CopyWAL(37*time.Second, long), r.SteadyRate()*long.Seconds(); math.Abs(got-want) > want*0.01 {
		t.Errorf("WAL over 100 cycles %.0f B, want the cycle's rate × the copy %.0f ±1 %%", got, want)
	}
	// A copy that runs past the checkpoint meets the next cycle's burst.
	if past, before := r.CopyWAL(500*time.Second, 60*time.Second), r.CopyWAL(400*time.Second, 60*time.Second); past < before*1.5 {
		t.Errorf("WAL of a minute past the cycle's end %.0f B, want well above a minute before it (%.0f): the images after the next checkpoint", past, before)
	}
	// Without the checkpoint's time: the window's own rate.
	r.SinceCheckpoint = -1
	if got, want := r.CopyWAL(37*time.Second, 140*time.Second), r.RawRate()*140; math.Abs(got-want) > 1 {
		t.Errorf("WAL over the copy without the checkpoint's time %.0f B, want the window's rate × the copy %.0f", got, want)
	}
}

// TestSlotWALOfSection20GB predicts section large's slot WAL at 20 GB
// from its probe's reading, the copy starting 37 s after the window and
// lasting 2m26s as predicted (2m20s measured). The slot peaked at 51.8
// MiB; the copy met 2,102 images (15.0 MiB) and 35.8 MiB of records: the
// writers wrote 516 rows/s under the copy against 599 in the window and
// 519 B a write against 596 (fewer records a write as they ran longer),
// which no probe of the window can see. So the prediction is held to the
// WAL the copy would have met at the window's records rate: the images as
// met, the records at the window's 347.8 KiB/s (47.6 MiB over 2m20s).
func TestSlotWALOfSection20GB(t *testing.T) {
	r := section20GB
	r.End = time.Date(2026, 12, 4, 2, 45, 0, 0, time.UTC)
	m := Move{ID: "large", Source: "source", Target: "target", Rows: 6791144, Bytes: 4060000000, // 3.78 GiB
		Probe: MoveProbe{SampleRows: 140000, SampleBytes: 4060000000 / 146, CopyTime: time.Second, Done: r.End.Add(37 * time.Second)}}
	shards := map[string]ShardProbe{"source": {Shard: "source", WAL: r, WALBytesPerSec: r.SteadyRate()}, "target": {Shard: "target"}}
	p := Predict([]Move{m}, shards, nil, Options{}).Moves[0]
	peak := 51.8 * (1 << 20)
	records := (r.RawRate() * (1 - r.FPIShare())) * 140.2
	met := records + 2102*7459
	old := r.SteadyRate() * p.Copy.Duration().Seconds()
	t.Logf("copy %s predicted; slot WAL %s (%+.0f %% of the peak %s, %+.0f %% of the WAL the copy would have met at the window's records rate, %s); the cycle's rate × the copy %s (%+.0f %%, %+.0f %%)",
		p.Copy.Duration().Round(time.Second), HumanBytes(p.SlotWAL), 100*(float64(p.SlotWAL)/peak-1), HumanBytes(int64(peak)), 100*(float64(p.SlotWAL)/met-1), HumanBytes(int64(met)),
		HumanBytes(int64(old)), 100*(old/peak-1), 100*(old/met-1))
	if got := float64(p.SlotWAL); got < met*0.75 || got > met*1.25 {
		t.Errorf("slot WAL %.0f B, want %.0f ±25 %% (the cycle's rate × the copy, the rule before, gives %.0f)", got, met, old)
	}
}

// TestSlotWALAtATenthOfSection20GB predicts the same run's slot WAL once a
// tenth was copied: 680,000 rows of 6,791,144 in 17.3 s, the slot
// retaining 10.4 MiB; it peaked at 51.8 MiB, and the rule before
// (retained + the tenth's SteadyRate × the rest) gave 67.2 MiB, +30 %.
func TestSlotWALAtATenthOfSection20GB(t *testing.T) {
	peak := 51.8 * (1 << 20)
	retained := int64(10_905_190) // 10.4 MiB
	got := float64(SlotWALAt(retained, section20GBTenth, section20GB, 680000, 6791144, section20GBTenth.Window))
	rest := section20GBTenth.Window.Seconds() * (6791144 - 680000) / 680000
	old := float64(retained) + section20GBTenth.SteadyRate()*rest
	t.Logf("at a tenth: %s predicted for a peak of %s (%+.0f %%); retained + the tenth's SteadyRate × the rest %s (%+.0f %%)",
		HumanBytes(int64(got)), HumanBytes(int64(peak)), 100*(got/peak-1), HumanBytes(int64(old)), 100*(old/peak-1))
	if got < peak*0.75 || got > peak*1.25 {
		t.Errorf("slot WAL at a tenth %.0f B, want %.0f ±25 %% (the rule before gives %.0f)", got, peak, old)
	}
}

func TestReadingsStoredBeforeTheirTimesDecode(t *testing.T) {
	var p ShardProbe
	if err := json.Unmarshal([]byte(`{"shard":"s","wal_bytes_per_sec":1,"wal":{"window":1000000000,"bytes":5,"since_checkpoint":-1}}`), &p); err != nil {
		t.Fatal(err)
	}
	var m MoveProbe
	if err := json.Unmarshal([]byte(`{"table":"t","sample_rows":1}`), &m); err != nil {
		t.Fatal(err)
	}
	if !p.WAL.End.IsZero() || !m.Done.IsZero() {
		t.Errorf("times of a stored reading: %v, %v; want zero", p.WAL.End, m.Done)
	}
	b, err := json.Marshal(MoveProbe{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"done"`) {
		t.Errorf("a probe without its time encodes %s: want no done", b)
	}
}
