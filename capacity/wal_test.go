package capacity

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/reshard/reshard/testkit/pgtest"
)

func TestSteadyWALRateSpreadsTheImagesOverTheCycle(t *testing.T) {
	// 10 s of 1 MiB/s of records and 4,000 images of 8 KiB (parts that
	// tell them apart), 30 s after a checkpoint of a 300-s cycle.
	parts := []WALPart{{Records: 1000, FPI: 3000, Bytes: 1000*1000 + 3000*8000}, {Records: 1000, FPI: 800, Bytes: 1000*1000 + 800*8000},
		{Records: 1000, FPI: 200, Bytes: 1000*1000 + 200*8000}, {Records: 1000, Bytes: 1000 * 1000}}
	r := WALReading{Window: 10 * time.Second, Bytes: 4000*1000 + 4000*8000, Records: 4000, FPI: 4000, StatBytes: 4000*1000 + 4000*8000,
		Parts: parts, SinceCheckpoint: 30 * time.Second, CheckpointTimeout: 300 * time.Second, MaxWALSize: 1 << 30}
	if f := r.FPIBytes(); f < 7999 || f > 8001 {
		t.Errorf("image size %.0f, want 8000 (the fit)", f)
	}
	for _, tc := range []struct {
		name  string
		since time.Duration
		want  float64 // B/s
	}{
		// The images die away (3,800 in the first half, 200 in the second:
		// an e-folding time of 5 s/ln 19), the second half's mean 320 kB/s,
		// so ln 19/18 of it at the window's end: the cycle holds 30 s of
		// them at the window's rate and that tail.
		{"just after a checkpoint: the cycle's share of a burst that dies away", 30 * time.Second, 400_000 + (3_200_000*30+320_000*math.Log(19)/18*5/math.Log(19))/300},
		{"a whole cycle after: the images as they come", 400 * time.Second, 3_600_000},
		{"the checkpoint's time not read: the images kept", -1, 3_600_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := r
			r.SinceCheckpoint = tc.since
			if got := r.SteadyRate(); got < tc.want*0.999 || got > tc.want*1.001 {
				t.Errorf("steady rate %.0f B/s, want %.0f (raw %.0f)", got, tc.want, r.RawRate())
			}
		})
	}
	// Images that do not slow (the same count in every part, records
	// varying): the pages touched for the first time are not running out,
	// so they come as they came over the cycle.
	even := r
	even.Parts = []WALPart{{Records: 500, FPI: 1000, Bytes: 500*1000 + 1000*8000}, {Records: 1500, FPI: 1000, Bytes: 1500*1000 + 1000*8000},
		{Records: 500, FPI: 1000, Bytes: 500*1000 + 1000*8000}, {Records: 1500, FPI: 1000, Bytes: 1500*1000 + 1000*8000}}
	if got := even.SteadyRate(); math.Abs(got-3_600_000) > 3_600 {
		t.Errorf("steady rate %.0f B/s of images that do not slow, want the window's 3600000", got)
	}
	// The same share of images in every part: their size is not told
	// apart, a whole page is taken.
	same := r
	same.Parts = []WALPart{{Records: 1000, FPI: 1000, Bytes: 9_000_000}, {Records: 1000, FPI: 1000, Bytes: 9_000_000}}
	if f := same.FPIBytes(); f != pageSize {
		t.Errorf("image size %.0f with the same share in every part, want a page (%d)", f, pageSize)
	}
	// max_wal_size fills before checkpoint_timeout: a shorter cycle.
	short := r
	short.MaxWALSize = 12_000_000 // 30 s of the records' 400 kB/s
	if got, want := short.SteadyRate(), 400_000+3_200_000.0; got < want*0.999 || got > want*1.001 {
		t.Errorf("steady rate %.0f B/s with a 30-s cycle, want %.0f", got, want)
	}
}

// TestProbeWALRateSkipsTheCheckpointsImages makes a checkpoint under a
// steady writer that touches ~1,250 pages at random, then probes: the
// window sees the burst of full-page images the checkpoint causes (the
// rate of the WAL position, the old rule, is several times the steady
// one), and the rate the model uses must be the steady one, measured over
// a window once the burst is over.
func TestProbeWALRateSkipsTheCheckpointsImages(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	pages := burst(t, db, 2)
	time.Sleep(time.Second)
	db.Exec(t, `CHECKPOINT`)
	p, err := ProbeShard(context.Background(), "src", db.Pool, 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The burst is over once every page was touched since the checkpoint
	// (2,000 updates a second over ~1,250 pages: 99 % after 3 s).
	l0, t0 := lsn(t, db), time.Now()
	time.Sleep(2 * time.Second)
	steady := float64(db.QueryInt64(t, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, l0)) / time.Since(t0).Seconds()
	w := p.WAL
	t.Logf("%d pages; window %s: %s of WAL (%s/s), %d records, %d images of %.0f B (%.0f %% of the bytes), %s after the checkpoint; steady rate %s/s; the model's %s/s",
		pages, w.Window.Round(time.Millisecond), HumanBytes(w.Bytes), HumanBytes(int64(w.RawRate())), w.Records, w.FPI, w.FPIBytes(), 100*w.FPIShare(),
		w.SinceCheckpoint.Round(time.Millisecond), HumanBytes(int64(steady)), HumanBytes(int64(p.WALBytesPerSec)))
	if w.RawRate() < 2*steady {
		t.Fatalf("the window saw %s/s against %s/s steady: no burst of images to skip (is full_page_writes on?)", HumanBytes(int64(w.RawRate())), HumanBytes(int64(steady)))
	}
	if p.WALBytesPerSec < steady*0.65 || p.WALBytesPerSec > steady*1.35 {
		t.Errorf("the model's WAL rate %s/s, want the steady %s/s within 35 %% (the window's raw rate %s/s)",
			HumanBytes(int64(p.WALBytesPerSec)), HumanBytes(int64(steady)), HumanBytes(int64(w.RawRate())))
	}
}

func TestSlotWALAtATenthTakesTheSteadyRateNotTheImagesOfItsStart(t *testing.T) {
	// A source writing 1,000 records/s of 200 B, and after a checkpoint at
	// the slot's creation 2,000 images/s of 8 kB dying away with an
	// e-folding time of 4 s; a 300-s cycle. The copy takes 100 s: its
	// first tenth (10 s, read by the second) is 97 % images.
	const (
		recs, recBytes = 1000.0, 200.0
		img0, imgBytes = 2000.0, 8000.0
		tau, tenth     = 4.0, 10
		copyS          = 100.0
	)
	images := func(a, b float64) float64 { return img0 * tau * (math.Exp(-a/tau) - math.Exp(-b/tau)) } // images in [a, b)
	r := WALReading{Window: tenth * time.Second, SinceCheckpoint: tenth * time.Second, CheckpointTimeout: 300 * time.Second, MaxWALSize: 1 << 30}
	for i := range tenth {
		p := WALPart{Records: recs, FPI: int64(math.Round(images(float64(i), float64(i+1))))}
		p.Bytes = p.Records*recBytes + p.FPI*imgBytes
		r.Parts = append(r.Parts, p)
		r.Records += p.Records
		r.FPI += p.FPI
		r.StatBytes += p.Bytes
	}
	r.Bytes = r.StatBytes
	retained := r.Bytes // the slot's WAL at the tenth: all of it since its creation
	// What the slot holds when the copy ends: the whole copy's WAL.
	want := recs*recBytes*copyS + images(0, copyS)*imgBytes
	got := float64(SlotWALAt(retained, r, WALReading{}, 10_000, 100_000, tenth*time.Second))
	t.Logf("at a tenth: retained %s (%.0f %% images), raw rate %s/s, steady %s/s; slot WAL predicted %s for %s (%+.0f %%)",
		HumanBytes(retained), 100*r.FPIShare(), HumanBytes(int64(r.RawRate())), HumanBytes(int64(r.SteadyRate())),
		HumanBytes(int64(got)), HumanBytes(int64(want)), 100*(got/want-1))
	if got < want*0.75 || got > want*1.25 { // the issue's ±25 %
		t.Errorf("slot WAL predicted at a tenth %.0f B, want %.0f ±25 %% (the raw rate × the rest gives %.0f)",
			got, want, float64(retained)+r.RawRate()*(copyS-tenth))
	}

	// Without images the rate is the reading's own, the rest at the
	// copy's own rate: 30 s for a quarter, so 90 s more.
	steady := WALReading{Window: 30 * time.Second, Bytes: 30_000_000, Records: 150_000, StatBytes: 30_000_000, SinceCheckpoint: 60 * time.Second,
		CheckpointTimeout: 300 * time.Second, MaxWALSize: 1 << 30}
	for range 30 {
		steady.Parts = append(steady.Parts, WALPart{Records: 5_000, Bytes: 1_000_000})
	}
	if got, want := SlotWALAt(40_000_000, steady, r, 25, 100, 30*time.Second), int64(40_000_000+1_000_000*90); got != want {
		t.Errorf("slot WAL predicted without images %d B, want %d (retained + 1 MB/s × 90 s)", got, want)
	}
	// A tenth of a part or two cannot show the images dying away: the
	// start's reading is taken.
	short := WALReading{Window: 2400 * time.Millisecond, Bytes: 9_000_000, Records: 5_000, FPI: 1_000, StatBytes: 9_000_000,
		Parts: []WALPart{{Records: 2_500, FPI: 600, Bytes: 4_500_000}, {Records: 2_500, FPI: 400, Bytes: 4_500_000}}, SinceCheckpoint: 20 * time.Second, CheckpointTimeout: 300 * time.Second}
	if got, want := SlotWALAt(9_000_000, short, steady, 10, 100, 2400*time.Millisecond), int64(9_000_000+1_000_000*21.6); got != want {
		t.Errorf("slot WAL predicted from a tenth of 2 parts %d B, want %d (retained + the start's 1 MB/s × 21.6 s; the tenth's own rate gives %.0f)",
			got, want, 9_000_000+short.SteadyRate()*21.6)
	}
}

func TestWALMeterReadsTheSpanByPart(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	setConf(t, db, "full_page_writes", "on")
	db.Exec(t, `CREATE TABLE span (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, pad text) WITH (fillfactor = 50);
		INSERT INTO span (id, pad) SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g`)
	db.Exec(t, `VACUUM span`)
	ctx := context.Background()
	w, err := db.Pool.Acquire(ctx) // one writer, its counters flushed after each update
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	db.Exec(t, `CHECKPOINT`)
	m, err := StartWALMeter(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	// Three parts: the first update after the checkpoint writes an image
	// of each page, the two after it records only.
	for i := range 3 {
		if _, err := w.Exec(ctx, `UPDATE span SET n = n + 1; SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if i < 2 {
			if err := m.Sample(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := m.Reading(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s over %s: parts %+v, %s after the checkpoint, cycle %s", HumanBytes(r.Bytes), r.Window.Round(time.Millisecond), r.Parts, r.SinceCheckpoint.Round(time.Millisecond), r.CheckpointTimeout)
	if len(r.Parts) != 3 {
		t.Fatalf("%d parts, want 3 (one a sample)", len(r.Parts))
	}
	var recs, fpi, bytes int64
	for _, p := range r.Parts {
		recs, fpi, bytes = recs+p.Records, fpi+p.FPI, bytes+p.Bytes
	}
	if recs != r.Records || fpi != r.FPI || bytes != r.StatBytes {
		t.Errorf("parts sum to %d records, %d images, %d B; the span %d, %d, %d", recs, fpi, bytes, r.Records, r.FPI, r.StatBytes)
	}
	if r.Parts[0].FPI < 100 || r.Parts[1].FPI*10 > r.Parts[0].FPI || r.Parts[2].FPI*10 > r.Parts[0].FPI {
		t.Errorf("images by part %d, %d, %d: want the first update's (one a page) and few after", r.Parts[0].FPI, r.Parts[1].FPI, r.Parts[2].FPI)
	}
	if r.Bytes <= 0 || r.SinceCheckpoint < r.Window || r.SinceCheckpoint > r.Window+5*time.Second || r.CheckpointTimeout <= 0 || r.MaxWALSize <= 0 {
		t.Errorf("reading %+v: want WAL, the checkpoint just before the span, and the checkpoint settings", r)
	}
}

// burst makes table burst (20,000 rows at fillfactor 50, full_page_writes
// on) and updates 2,000 of its rows a second, at random, until the test
// ends: after a checkpoint, a burst of full-page images that dies away.
// It returns the table's pages.
func burst(t *testing.T, db *pgtest.DB, seed uint64) int64 {
	t.Helper()
	setConf(t, db, "full_page_writes", "on")
	db.Exec(t, `CREATE TABLE burst (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, pad text) WITH (fillfactor = 50);
		INSERT INTO burst (id, pad) SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g`)
	db.Exec(t, `VACUUM ANALYZE burst`)
	pages := db.QueryInt64(t, `SELECT relpages FROM pg_class WHERE relname = 'burst'`)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // 2,000 HOT updates a second, at random over the table
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(34, seed))
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		ids := make([]int32, 100)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i := range ids {
				ids[i] = 1 + rnd.Int32N(20000)
			}
			if _, err := db.Pool.Exec(ctx, `UPDATE burst SET n = n + 1 WHERE id = ANY($1)`, ids); err != nil && ctx.Err() == nil {
				t.Errorf("update: %v", err)
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return pages
}
