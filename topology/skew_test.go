package topology

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// Three shards with the same token space each. One holds a "celebrity" user
// with many large rows (data skew in one range), another takes most of the
// writes during the measurement (traffic skew), the third is ordinary. The
// report must name the first for rows and bytes, the second for writes, and
// the celebrity's range as the hottest.
func TestSkewNamesHotShardsAndRange(t *testing.T) {
	names := []string{"s1", "s2", "s3"}
	shards := map[string]*pgtest.DB{}
	var vnodes []ring.VNode
	step := uint64(math.MaxUint64) / 12
	for i := range 12 { // 4 interleaved vnodes per shard, evenly spaced
		vnodes = append(vnodes, ring.VNode{Token: ring.MinToken + int64(uint64(i+1)*step-1), Shard: names[i%3]})
	}
	topo := mustTopo(t, vnodes, nil, "skew test")
	topo.Version = 7
	ctx := testCtx(t)

	const celebrity = 424242
	byShard := map[string][]int64{}
	for u := int64(1); u <= 3000; u++ {
		sh := topo.Ring.Owner(ring.TokenInt64(u))
		byShard[sh] = append(byShard[sh], u)
	}
	celebShard := topo.Ring.Owner(ring.TokenInt64(celebrity))
	for _, n := range names {
		db := pgtest.NewDB(t, 0)
		shards[n] = db
		db.Exec(t, `CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, user_id bigint, payload text NOT NULL)`)
		// Load on one connection and flush its statistics, then wait until
		// they are visible: loading must not count as writes in the interval.
		conn := db.Conn(t)
		want := int64(len(byShard[n]))
		if _, err := conn.Exec(ctx, `INSERT INTO events (user_id, payload) SELECT u, repeat('x', 50) FROM unnest($1::bigint[]) u`, byShard[n]); err != nil {
			t.Fatal(err)
		}
		if n == celebShard {
			want += 20000
			if _, err := conn.Exec(ctx, `INSERT INTO events (user_id, payload) SELECT $1, repeat('y', 400) FROM generate_series(1, 20000)`, int64(celebrity)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool {
			return db.QueryInt64(t, `SELECT coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'events'), 0)`) >= want
		})
	}
	hotName := celebShard
	writeName := names[0]
	if writeName == hotName {
		writeName = names[1]
	}

	// Writers: one busy shard, the others trickling. Each flushes its
	// statistics at once so the counters move during the interval.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, n := range names {
		conn := shards[n].Conn(t)
		batch, pause := 2, 100*time.Millisecond
		if n == writeName {
			batch, pause = 300, 10*time.Millisecond
		}
		wg.Go(func() {
			for wctx.Err() == nil {
				if _, err := conn.Exec(wctx, `UPDATE events SET payload = payload WHERE id IN (SELECT id FROM events ORDER BY id LIMIT $1)`, batch); err != nil {
					return
				}
				if _, err := conn.Exec(wctx, `SELECT pg_stat_force_next_flush()`); err != nil {
					return
				}
				time.Sleep(pause)
			}
		})
	}
	rep, err := Skew(ctx, topo, pools(shards), SkewOptions{
		Tables:   []SkewTable{{Name: "public.events", KeyColumn: "user_id"}},
		Interval: 2 * time.Second,
	})
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Shards {
		t.Logf("%s: space %.3f rows %.0f bytes %d writes/s %.0f foreign %.0f", f.Shard, f.Space, f.Rows, f.Bytes, f.WritesPerSec, f.ForeignRows)
	}
	t.Logf("rows %+v bytes %+v writes %+v", rep.Rows, rep.Bytes, rep.Writes)
	if rep.Version != 7 || len(rep.Shards) != 3 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Rows.Hottest != hotName || rep.Rows.Ratio < 5 {
		t.Errorf("rows: %+v, want %s with max/median >= 5", rep.Rows, hotName)
	}
	if rep.Bytes.Hottest != hotName || rep.Bytes.Ratio < 3 {
		t.Errorf("bytes: %+v, want %s with max/median >= 3", rep.Bytes, hotName)
	}
	if rep.Writes.Hottest != writeName || rep.Writes.Ratio < 5 {
		t.Errorf("writes: %+v, want %s with max/median >= 5", rep.Writes, writeName)
	}
	for _, f := range rep.Shards {
		if f.ForeignRows != 0 || f.Tables[0].SamplePercent != 100 {
			t.Errorf("%s: foreign rows %g, sample %g%%; want 0 and an exact count", f.Shard, f.ForeignRows, f.Tables[0].SamplePercent)
		}
	}
	if len(rep.HotRanges) == 0 || !rep.HotRanges[0].Range.Contains(ring.TokenInt64(celebrity)) || rep.HotRanges[0].Shard != hotName {
		t.Fatalf("hottest ranges %+v, want first the range of user %d on %s", rep.HotRanges, celebrity, hotName)
	}
	if h := rep.HotRanges[0]; h.RowShare < 0.5 || h.SpaceShare > 0.1 {
		t.Errorf("hottest range %+v: want over half the rows in a twelfth of the space", h)
	}

	// Large tables are sampled; the hot shard stays the hot shard, and rows
	// the ring gives to another shard are reported as foreign.
	stray := keyWithToken(t, func(tok int64) bool { return topo.Ring.Owner(tok) != writeName })
	shards[writeName].Exec(t, `INSERT INTO events (user_id, payload) SELECT $1, 'stray' FROM generate_series(1, 10)`, stray)
	for _, db := range shards {
		db.Exec(t, `ANALYZE events`)
	}
	rep, err = Skew(ctx, topo, pools(shards), SkewOptions{
		Tables:          []SkewTable{{Name: "events", KeyColumn: "user_id"}},
		Interval:        10 * time.Millisecond,
		ExactBelowBytes: 1,
		SampleBytes:     1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows.Hottest != hotName {
		t.Errorf("sampled rows: %+v, want %s", rep.Rows, hotName)
	}
	for _, f := range rep.Shards {
		if f.Shard == hotName && f.Tables[0].SamplePercent >= 100 {
			t.Errorf("%s: %g%% sample, want a sample of its %d bytes", f.Shard, f.Tables[0].SamplePercent, f.Bytes)
		}
	}
	// The exact path again, to see the strays.
	rep, err = Skew(ctx, topo, pools(shards), SkewOptions{Tables: []SkewTable{{Name: "events", KeyColumn: "user_id"}}, Interval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Shards {
		want := 0.0
		if f.Shard == writeName {
			want = 10
		}
		if f.ForeignRows != want {
			t.Errorf("%s: %g foreign rows, want %g", f.Shard, f.ForeignRows, want)
		}
	}

	if _, err := Skew(ctx, topo, pools(shards), SkewOptions{Tables: []SkewTable{{Name: "nope", KeyColumn: "user_id"}}}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing table: %v", err)
	}
	delete(shards, "s2")
	if _, err := Skew(ctx, topo, pools(shards), SkewOptions{Tables: []SkewTable{{Name: "events", KeyColumn: "user_id"}}}); err == nil || !strings.Contains(err.Error(), "s2") {
		t.Errorf("missing shard: %v", err)
	}
}

// SkewDefaults: a keyspace's registered tables and key type fill what the
// caller left out; tables named without any keyspace are bigint; neither
// is ErrNoKeyspace.
func TestSkewDefaults(t *testing.T) {
	ctx := testCtx(t)
	s, _ := newControl(t)
	var o SkewOptions
	if err := s.SkewDefaults(ctx, "", &o, false); !errors.Is(err, ErrNoKeyspace) {
		t.Fatalf("no keyspace, no tables: %v, want ErrNoKeyspace", err)
	}
	o = SkewOptions{Tables: []SkewTable{{Name: "t", KeyColumn: "k"}}}
	if err := s.SkewDefaults(ctx, "", &o, false); err != nil || o.KeyType != ring.KeyInt {
		t.Fatalf("tables without a keyspace: key type %q, %v; want bigint", o.KeyType, err)
	}
	if _, err := s.RegisterTables(ctx, "billing", ring.KeyText, []tableset.TableSpec{{Schema: "app", Table: "invoices", KeyColumn: "customer"}}); err != nil {
		t.Fatal(err)
	}
	o = SkewOptions{}
	if err := s.SkewDefaults(ctx, "billing", &o, false); err != nil || o.KeyType != ring.KeyText || len(o.Tables) != 1 || o.Tables[0] != (SkewTable{Name: "app.invoices", KeyColumn: "customer"}) {
		t.Fatalf("registered keyspace: %+v, %v; want its table app.invoices:customer and text keys", o, err)
	}
	o = SkewOptions{KeyType: ring.KeyUUID}
	if err := s.SkewDefaults(ctx, "billing", &o, true); err != nil || o.KeyType != ring.KeyUUID || len(o.Tables) != 1 {
		t.Fatalf("key type given: %+v, %v; want it kept and the tables filled", o, err)
	}
}
