//go:build e2e

package capacity

import (
	"context"
	"testing"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestSlotWALAtATenthOfARealBurst: a slot created just after a CHECKPOINT
// under 2,000 updates a second over ~1,250 pages, the first tenth of a
// "copy" of 60 s read by a WALMeter (6 parts). SlotWALAt at the tenth
// (the slot's retained WAL + the rest at the tenth's SteadyRate) is within
// ±25 % of what the slot retains at the end; the tenth's raw rate for the
// whole copy, the bench's rule before, is logged beside it.
func TestSlotWALAtATenthOfARealBurst(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	burst(t, db, 3)
	time.Sleep(2 * time.Second)
	bg := context.Background()
	db.Exec(t, `CHECKPOINT`)
	db.Exec(t, `SELECT pg_create_logical_replication_slot('tenth', 'test_decoding')`)
	t.Cleanup(func() { db.Exec(t, `SELECT pg_drop_replication_slot('tenth')`) })
	start := time.Now()
	m, err := StartWALMeter(bg, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 6; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
		if err := m.Sample(bg); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(start.Add(6 * time.Second)))
	r, err := m.Reading(bg)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Since(start)
	sl, err := backfill.ReadSlot(bg, db.Pool, "tenth", 0)
	if err != nil {
		t.Fatal(err)
	}
	pred := SlotWALAt(sl.Retained, r, WALReading{}, 1, 10, at)
	raw := float64(sl.Retained) / at.Seconds() * 10 * at.Seconds()
	time.Sleep(time.Until(start.Add(10 * at)))
	end, err := backfill.ReadSlot(bg, db.Pool, "tenth", 0)
	if err != nil {
		t.Fatal(err)
	}
	var fpi []int64
	for _, p := range r.Parts {
		fpi = append(fpi, p.FPI)
	}
	t.Logf("tenth %s: slot retains %s; WAL %s/s raw, %s/s over the cycle (%.0f %% images by part %v); predicted %s, the raw rule %s; the slot at %s: %s (%+.0f %%, raw %+.0f %%)",
		at.Round(time.Millisecond), HumanBytes(sl.Retained), HumanBytes(int64(r.RawRate())), HumanBytes(int64(r.SteadyRate())), 100*r.FPIShare(), fpi,
		HumanBytes(pred), HumanBytes(int64(raw)), (10 * at).Round(time.Second), HumanBytes(end.Retained),
		100*(float64(pred)/float64(end.Retained)-1), 100*(raw/float64(end.Retained)-1))
	if !r.Followable() {
		t.Fatalf("the tenth's reading has %d parts: not followable, the test reads nothing", len(r.Parts))
	}
	if p, a := float64(pred), float64(end.Retained); p < a*0.75 || p > a*1.25 {
		t.Errorf("slot WAL predicted at a tenth %s, the slot retained %s at the end: want ±25 %%", HumanBytes(pred), HumanBytes(end.Retained))
	}
}
