package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

const liveSchema = `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, balance bigint NOT NULL DEFAULT 0,
	payload text, updated_at timestamptz NOT NULL DEFAULT now())`

// A real move in miniature — slot, copy, CDC stream — with writers running
// flat out on the source the whole time: every verification, held at its
// snapshot's LSN, finds the copy correct.
func TestNoFalseMismatchUnderLiveWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, liveSchema)
	dst.Exec(t, liveSchema)
	src.Exec(t, `INSERT INTO users SELECT g, 'u' || g, g % 100, md5(g::text) FROM generate_series(1, 20000) g`)
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: -4_000_000_000_000_000_000}, {Lo: 2_000_000_000_000_000_000, Hi: 6_000_000_000_000_000_000}}
	spec := tableset.Spec{Name: "users", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}
	srcSet := introspect(t, src, spec)
	dstSet, err := tableset.Introspect(ctx, dst.Pool, spec, "target")
	if err != nil {
		t.Fatal(err)
	}

	// Writers start before the slot and never pause.
	var writes atomic.Int64
	liveWriters(t, ctx, src, &writes)
	time.Sleep(200 * time.Millisecond)

	names, l0 := slotOf(t, ctx, src, "verifylive", dstSet, ranges)
	if _, err := backfill.Copy(ctx, src.Pool, dst.Pool, backfill.Options{Move: "verifylive", Set: srcSet, Ranges: ranges, ChunkRows: 5000}); err != nil {
		t.Fatal(err)
	}
	stream := runStream(t, ctx, src, dst, "verifylive", names, l0, dstSet, ranges)

	holder := &loggingHolder{t: t, s: stream}
	var last string
	for run := range 10 {
		before := writes.Load()
		rep, err := Run(ctx, src.Pool, dst.Pool, Options{Set: srcSet, Ranges: ranges, Holder: holder, ChunkRows: 1500, Parallel: 2, BisectRows: 200})
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		during := writes.Load() - before
		if !rep.OK() {
			t.Fatalf("run %d at %s: %d false mismatches (%d writes during the run): %+v", run, rep.LSN, rep.Mismatches(), during, rep.Tables[0].AllKeys())
		}
		if rep.LSN == "" || rep.LSN == last || rep.Rows < 5000 || len(rep.Tables[0].Chunks) < 3 {
			t.Fatalf("run %d: LSN %q (previous %q), %d rows in %d chunks", run, rep.LSN, last, rep.Rows, len(rep.Tables[0].Chunks))
		}
		if during == 0 {
			t.Fatalf("run %d: no write happened during the verification", run)
		}
		t.Logf("run %d at %s: %d rows, %d chunks, 0 mismatches, %d source writes meanwhile, %v", run, rep.LSN, rep.Rows, len(rep.Tables[0].Chunks), during, rep.Duration.Round(time.Millisecond))
		last = rep.LSN
	}

	// The check itself can fail here: a row changed behind the applier's back
	// is found at once, under the same live writes.
	intruder := inRange(t, src, ranges, 900_000_000, 900_100_000, true)
	dst.Exec(t, "INSERT INTO users VALUES ($1, 'intruder', 0, 'x')", intruder)
	rep, err := Run(ctx, src.Pool, dst.Pool, Options{Set: srcSet, Ranges: ranges, Holder: stream, ChunkRows: 1500})
	if err != nil {
		t.Fatal(err)
	}
	keys := rep.Tables[0].AllKeys()
	if rep.Mismatches() != 1 || keys[0].Kind != Extra || keys[0].Key[0] != fmt.Sprint(intruder) {
		t.Fatalf("intruder row %d: %d mismatches %+v", intruder, rep.Mismatches(), keys)
	}
}

// write runs single-row transactions against the source as fast as it can:
// inserts, updates, deletes and key changes, in and out of the moving ranges.
func write(ctx context.Context, db *pgtest.DB, seed uint64, n *atomic.Int64) {
	rnd := rand.New(rand.NewPCG(seed, 7))
	next := int64(1_000_000 * (seed + 1))
	for ctx.Err() == nil {
		id := rnd.Int64N(20000) + 1
		var sql string
		var args []any
		switch op := rnd.IntN(10); {
		case op < 3:
			next++
			sql, args = "INSERT INTO users VALUES ($1::bigint, 'new' || $1::bigint, 0, md5(random()::text)) ON CONFLICT DO NOTHING", []any{next}
		case op < 7:
			sql, args = "UPDATE users SET balance = balance + 1, updated_at = clock_timestamp() WHERE id = $1", []any{id}
		case op < 8:
			sql, args = "DELETE FROM users WHERE id = $1", []any{id}
		default:
			next++
			sql, args = "UPDATE users SET id = $2 WHERE id = $1", []any{id, next}
		}
		if _, err := db.Pool.Exec(ctx, sql, args...); err == nil {
			n.Add(1)
		}
	}
}

type loggingHolder struct {
	t *testing.T
	s *cdc.Stream
}

func (h *loggingHolder) HoldAt(ctx context.Context, lsn pglogrepl.LSN) error {
	err := h.s.HoldAt(ctx, lsn)
	r, a, k := h.s.Positions()
	h.t.Logf("HoldAt(%s) = %v; received %s applied %s acked %s", lsn, err, r, a, k)
	return err
}

func (h *loggingHolder) Release() { h.s.Release() }
