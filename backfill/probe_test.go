package backfill

import (
	"context"
	"testing"
	"time"
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
