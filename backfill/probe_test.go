package backfill

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
)

// TestProbeCopiesAsTheCopyAndKeepsNothing: Probe reads the moving rows in
// the copy's chunks and order, writes them into a table on the target
// that its transaction's rollback takes away, and stops at its bounds.
func TestProbeCopiesAsTheCopyAndKeepsNothing(t *testing.T) {
	f := newFixture(t, 5000)
	users := f.set.Tables[0]
	inRange := int64(len(dump(t, f.src, "users", f.ranges)))
	before := f.dst.QueryInt64(t, `SELECT count(*) FROM users`)
	ctx := context.Background()
	st, err := Probe(ctx, f.src.Pool, f.dst.Pool, users, ProbeOptions{Ranges: f.ranges, ChunkRows: 500, MinBytes: 1 << 30, MinTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The ranges cover over 1/16 of the token space: by primary key.
	if st.Rows != inRange || st.Chunks != inRange/500+1 || !st.AllRows || st.Order != OrderPK || st.Bytes <= 0 {
		t.Errorf("probe %+v, want all %d rows of the ranges in chunks of 500 by primary key", st, inRange)
	}
	// Bounded: it stops past MaxTime, after its first chunk.
	st, err = Probe(ctx, f.src.Pool, f.dst.Pool, users, ProbeOptions{Ranges: f.ranges, ChunkRows: 500, MinBytes: 1 << 30, MinTime: time.Minute, MaxTime: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 500 || st.Chunks != 1 || st.AllRows {
		t.Errorf("probe %+v, want one chunk of 500 rows", st)
	}
	// Held in two target transactions, the chunks in turn, each table seen
	// by its own transaction alone, until the rollback.
	var held []Held
	st, err = Probe(ctx, f.src.Pool, f.dst.Pool, users, ProbeOptions{Ranges: f.ranges, ChunkRows: 500, MinBytes: 1 << 30, MinTime: time.Minute, Hold: 2,
		Then: func(ctx context.Context, hs []Held) error {
			held = hs
			for _, h := range hs {
				var n int64
				if err := h.Tx.QueryRow(ctx, "SELECT count(*) FROM "+h.Into.Quoted()).Scan(&n); err != nil || n != h.Rows {
					t.Errorf("%s holds %d rows in its transaction (%v), want %d", h.Into.Quoted(), n, err, h.Rows)
				}
				if n := f.dst.QueryInt64(t, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, h.Into.Schema); n != 0 {
					t.Errorf("another session sees the probe's schema %s", h.Into.Schema)
				}
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 2 || held[0].Rows+held[1].Rows != inRange || st.Rows != inRange || held[1].Rows < 500 || held[0].Rows-held[1].Rows > 500 || held[1].Rows-held[0].Rows > 500 {
		t.Errorf("held %+v after %+v: want the %d rows in two tables, the chunks of 500 in turn", held, st, inRange)
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users`); n != before {
		t.Errorf("the target's users went from %d to %d rows", before, n)
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname LIKE 'capacity_probe%'`); n != 0 {
		t.Errorf("the probe left its table on the target")
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'reshard_probe%'`); n != 0 {
		t.Errorf("the probe left its schemas on the target")
	}
}

// TestProbeSpreadsOverALargeTable: a table whose moving rows fill 4 chunks
// a part is read by parts of its key space in spread order, so the probe's
// second chunk comes from past the middle of the table, not after its
// first; read to the end, the parts hold every moving row once.
func TestProbeSpreadsOverALargeTable(t *testing.T) {
	f := newFixture(t, 20000)
	users := f.set.Tables[0]
	inRange := int64(len(dump(t, f.src, "users", f.ranges)))
	ctx := context.Background()
	c := &copier{src: f.src.Pool, moving: ring.Normalize(f.ranges)}
	u := []unit{{table: users, rng: c.moving[0], parts: c.moving, order: OrderPK}}
	segs, spread, err := c.probeSegments(ctx, users, u, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !spread || len(segs) != probeParts || segs[0].pos.pk != nil || segs[0].end == nil {
		t.Fatalf("%d segments (spread %v), the first from %v to %v; want %d, the first from the start", len(segs), spread, segs[0].pos.pk, segs[0].end, probeParts)
	}
	t.Logf("the second part starts after id %v", segs[1].pos.pk)
	if mid, _ := strconv.Atoi(segs[1].pos.pk[0]); mid < 20000*3/10 || segs[1].end == nil {
		t.Errorf("the second part starts after id %v; want one near the middle of 1..20000", segs[1].pos.pk)
	}
	// Too few moving rows for parts of 4 chunks: from the first key on.
	if segs, spread, err := c.probeSegments(ctx, users, u, 1000); err != nil || spread || len(segs) != 1 || segs[0].end != nil {
		t.Errorf("chunks of 1,000: %d segments (spread %v, %v); want the table whole", len(segs), spread, err)
	}

	st, err := Probe(ctx, f.src.Pool, f.dst.Pool, users, ProbeOptions{Ranges: f.ranges, ChunkRows: 100, MinBytes: 1 << 30, MinTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != inRange || !st.AllRows || st.Segments != probeParts {
		t.Errorf("probe %+v, want all %d rows of the ranges, once each, from %d parts", st, inRange, probeParts)
	}
}
