package router

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

// offerRouter is a router with no control database, for offer alone.
func offerRouter(m *Metrics) *Router {
	r := &Router{opts: Options{Metrics: m}}
	r.opts.defaults()
	return r
}

func topoAt(t *testing.T, version int64, shard string) topology.Topology {
	topo := mustTopo(t, single(shard), nil, "test")
	topo.Version = version
	return topo
}

func TestOfferNeverGoesBack(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	r := offerRouter(m)
	for _, step := range []struct {
		version int64
		adopted bool
		want    int64
	}{
		{41, true, 41},
		{43, true, 43},
		{42, false, 43}, // late delivery of an older version
		{43, false, 43}, // the same again
		{1, false, 43},
	} {
		if got := r.offer(topoAt(t, step.version, "s"+string(rune('0'+step.version%10))), "test"); got != step.adopted {
			t.Errorf("offer v%d: adopted %v, want %v", step.version, got, step.adopted)
		}
		if r.Version() != step.want {
			t.Fatalf("after offering v%d the router is on v%d, want v%d", step.version, r.Version(), step.want)
		}
	}
	if got := r.Owner(12345); got != "s3" {
		t.Errorf("routes with %s, want v43's s3", got)
	}
	if v := counterValue(t, m.version); v != 43 {
		t.Errorf("version gauge %g, want 43", v)
	}
	if v := counterValue(t, m.stale); v != 3 {
		t.Errorf("stale offers %g, want 3", v)
	}
}

func TestOfferConcurrentConvergesOnNewest(t *testing.T) {
	r := offerRouter(nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				v := int64((i*7+g*13)%500 + 1)
				r.offer(topoAt(t, v, "s"), "test")
				if got := r.Version(); got < v {
					t.Errorf("router at v%d right after offering v%d", got, v)
					return
				}
			}
		})
	}
	wg.Wait()
	if r.Version() != 500 {
		t.Fatalf("router at v%d, want the newest offered, v500", r.Version())
	}
}

func TestOwnerDoesNotAllocate(t *testing.T) {
	r := offerRouter(NewMetrics(nil))
	r.offer(mustTopo(t, halves("a", "b"), nil, "x"), "test")
	if n := testing.AllocsPerRun(1000, func() { _ = r.Owner(12345) }); n != 0 {
		t.Errorf("Owner: %g allocs", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = r.RouteToken(12345) }); n != 0 {
		t.Errorf("RouteToken: %g allocs", n)
	}
}

// A router following the control DB through NOTIFY only (polling off).
func TestRouterFollowsNotify(t *testing.T) {
	s, _ := newControl(t)
	register(t, s, "a", "b")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	m := NewMetrics(prometheus.NewRegistry())
	r, err := New(testCtx(t), s, nil, Options{PollInterval: -1, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// Once subscribed, the listener reloads (v1 again: a stale offer); after
	// that, only a notification can bring v2, polling being off.
	waitFor(t, func() bool { return counterValue(t, m.stale) >= 1 })
	mustPublish(t, s, 1, mustTopo(t, single("b"), nil, "move all to b"))
	waitFor(t, func() bool { return r.Version() == 2 })
	if shard, v, err := r.Route(int64(7)); err != nil || shard != "b" || v != 2 {
		t.Fatalf("Route = %s, v%d, %v; want b at v2", shard, v, err)
	}
	if n := counterValue(t, m.refreshes.WithLabelValues("notify")); n != 1 {
		t.Fatalf("%g versions adopted through NOTIFY, want 1", n)
	}
}

// fenceable creates kv on db with a trigger raising the fence error while
// reshard_test_fence holds a row: the shape of the cutover package's fence.
func fenceable(t *testing.T, db *pgtest.DB) {
	t.Helper()
	db.Exec(t, `CREATE TABLE kv (k bigint PRIMARY KEY, v text NOT NULL);
CREATE TABLE reshard_test_fence (on_ boolean);
CREATE FUNCTION kv_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM reshard_test_fence) THEN
		RAISE EXCEPTION 'token range fenced on this shard (epoch 7)' USING ERRCODE = '`+FenceSQLState+`';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER kv_fence BEFORE INSERT OR UPDATE OR DELETE ON kv FOR EACH ROW EXECUTE FUNCTION kv_fence();`)
}

func put(k int64, v string) func(context.Context, *pgxpool.Pool) error {
	return func(ctx context.Context, p *pgxpool.Pool) error {
		_, err := p.Exec(ctx, `INSERT INTO kv VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v`, k, v)
		return err
	}
}

func TestDoRetriesOnNewOwnerAfterFence(t *testing.T) {
	s, _ := newControl(t)
	shards := map[string]*pgtest.DB{"a": pgtest.NewDB(t, 0), "b": pgtest.NewDB(t, 0)}
	for _, db := range shards {
		fenceable(t, db)
	}
	register(t, s, "a", "b")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	m := NewMetrics(prometheus.NewRegistry())
	// No Run: the router stays on v1 until a fence error makes it look.
	r, err := New(testCtx(t), s, pools(shards), Options{Metrics: m, PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := r.Do(ctx, int64(1), put(1, "before")); err != nil {
		t.Fatal(err)
	}

	// Cutover of everything to b: a fences, v2 is published.
	shards["a"].Exec(t, `INSERT INTO reshard_test_fence VALUES (true)`)
	mustPublish(t, s, 1, mustTopo(t, single("b"), nil, "cutover"))
	if err := r.Do(ctx, int64(1), put(1, "after")); err != nil {
		t.Fatalf("Do after cutover: %v", err)
	}
	if r.Version() != 2 {
		t.Fatalf("router on v%d after the fence, want v2", r.Version())
	}
	if got := shards["b"].QueryInt64(t, `SELECT count(*) FROM kv WHERE k = 1 AND v = 'after'`); got != 1 {
		t.Fatal("the retried write is not on the new owner")
	}
	if got := shards["a"].QueryInt64(t, `SELECT count(*) FROM kv WHERE v = 'after'`); got != 0 {
		t.Fatal("the fenced write reached the old owner")
	}
	if v := counterValue(t, m.fenceRetries); v != 1 {
		t.Errorf("fence retries %g, want 1", v)
	}
	for v, want := range map[string]float64{"1": 2, "2": 1} {
		if got := counterValue(t, m.requests.WithLabelValues(v)); got != want {
			t.Errorf("requests at ring version %s: %g, want %g", v, got, want)
		}
	}

	// Write pause: b fenced, no new topology yet; it arrives a little later.
	shards["b"].Exec(t, `INSERT INTO reshard_test_fence VALUES (true)`)
	go func() {
		time.Sleep(150 * time.Millisecond)
		shards["a"].Exec(t, `DELETE FROM reshard_test_fence`)
		if _, err := s.Publish(context.Background(), 2, mustTopo(t, single("a"), nil, "rollback")); err != nil {
			t.Errorf("publish v3: %v", err)
		}
	}()
	if err := r.Do(ctx, int64(1), put(1, "paused")); err != nil {
		t.Fatalf("Do across a write pause: %v", err)
	}
	if r.Version() != 3 || shards["a"].QueryInt64(t, `SELECT count(*) FROM kv WHERE v = 'paused'`) != 1 {
		t.Fatalf("after the pause: router v%d; the write is not on a", r.Version())
	}
	if v := counterValue(t, m.fenceRetries); v < 2 {
		t.Errorf("fence retries %g, want at least one more (the pause)", v)
	}
}

func TestDoGivesUpWhenFenceStays(t *testing.T) {
	s, _ := newControl(t)
	shards := map[string]*pgtest.DB{"a": pgtest.NewDB(t, 0)}
	fenceable(t, shards["a"])
	shards["a"].Exec(t, `INSERT INTO reshard_test_fence VALUES (true)`)
	register(t, s, "a")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	r, err := New(testCtx(t), s, pools(shards), Options{PollInterval: -1, FenceRetries: 3, FenceBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = r.Do(testCtx(t), int64(5), func(ctx context.Context, p *pgxpool.Pool) error {
		calls++
		return put(5, "x")(ctx, p)
	})
	var fe *FencedError
	if !IsFenceError(err) || !errors.Is(err, ErrFenced) || !errors.As(err, &fe) || fe.Tries != 4 || !strings.Contains(err.Error(), "still fenced") || calls != 4 {
		t.Fatalf("err %v after %d calls; want a FencedError after 1+3 calls", err, calls)
	}

	// Bounded by time: MaxFenceWait, or the caller's deadline when sooner;
	// the wait is measured.
	m := NewMetrics(prometheus.NewRegistry())
	rw, err := New(testCtx(t), s, pools(shards), Options{PollInterval: -1, MaxFenceWait: 300 * time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = rw.Do(testCtx(t), int64(5), put(5, "x"))
	// The upper bounds leave room for a loaded machine (CI runs packages
	// side by side): they catch a wait that ignores the bound, not jitter.
	if took := time.Since(start); !errors.As(err, &fe) || took < 300*time.Millisecond || took > 3*time.Second || fe.Waited < 300*time.Millisecond {
		t.Fatalf("MaxFenceWait 300ms: %v after %s", err, took)
	}
	// A deadline sooner than MaxFenceWait: the router gives up with a
	// FencedError while the context is still live. Waiting into the
	// deadline would end in the context's error instead, which is not
	// ErrFenced, so the error's kind is the test; the time is a backstop.
	dctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = rw.Do(dctx, int64(5), put(5, "x"))
	if took := time.Since(start); !errors.Is(err, ErrFenced) || took > 2*time.Second {
		t.Fatalf("deadline 200ms: %v after %s; want a FencedError before the deadline", err, took)
	}
	if n := histogramCount(t, m.fenceWaits); n != 2 {
		t.Errorf("fence waits observed %d, want 2", n)
	}
	if v := counterValue(t, m.fencedOuts); v != 2 {
		t.Errorf("fenced-out requests %g, want 2", v)
	}
	// A shard the application has no pool for is an error naming it.
	mustPublish(t, s, 1, mustTopo(t, single("a"), nil, "same"))
	register(t, s, "z")
	mustPublish(t, s, 2, mustTopo(t, single("z"), nil, "to z"))
	if err := r.Refresh(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.Do(testCtx(t), int64(5), put(5, "x")); err == nil || !strings.Contains(err.Error(), `"z"`) {
		t.Fatalf("missing pool: %v", err)
	}
}

func TestReadFallbackToOldOwner(t *testing.T) {
	s, _ := newControl(t)
	shards := map[string]*pgtest.DB{"a": pgtest.NewDB(t, 0), "b": pgtest.NewDB(t, 0)}
	for _, db := range shards {
		fenceable(t, db)
	}
	register(t, s, "a", "b")
	// (0, MaxToken] is moving from a to b and is cut over: b serves it.
	k := keyWithToken(t, func(tok int64) bool { return tok > 0 })
	moving := []topology.RangeState{{Range: ring.Range{Lo: 0, Hi: ring.MaxToken}, Owner: "b", Status: topology.Migrating, From: "a", To: "b"}}
	mustPublish(t, s, 0, mustTopo(t, halves("a", "b"), moving, "cutover of (0,max]"))
	shards["a"].Exec(t, `INSERT INTO kv VALUES ($1, 'only on a')`, k)
	get := func(out *string) func(context.Context, *pgxpool.Pool) error {
		return func(ctx context.Context, p *pgxpool.Pool) error {
			return p.QueryRow(ctx, `SELECT v FROM kv WHERE k = $1`, k).Scan(out)
		}
	}

	plain, err := New(testCtx(t), s, pools(shards), Options{PollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := plain.Read(testCtx(t), k, get(&v)); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("without fallback: %q, %v; want no rows from b", v, err)
	}

	m := NewMetrics(prometheus.NewRegistry())
	fb, err := New(testCtx(t), s, pools(shards), Options{PollInterval: -1, ReadFallback: true, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.Read(testCtx(t), k, get(&v)); err != nil || v != "only on a" {
		t.Fatalf("with fallback: %q, %v; want the old owner's row", v, err)
	}
	if got := counterValue(t, m.fallbackReads); got != 1 {
		t.Errorf("fallback reads %g, want 1", got)
	}
	// Do (writes) never falls back.
	if err := fb.Do(testCtx(t), k, get(&v)); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("Do fell back: %v", err)
	}
	// A stable range has no old owner to ask.
	k2 := keyWithToken(t, func(tok int64) bool { return tok <= 0 })
	shards["b"].Exec(t, `INSERT INTO kv VALUES ($1, 'stray')`, k2)
	if err := fb.Read(testCtx(t), k2, func(ctx context.Context, p *pgxpool.Pool) error {
		return p.QueryRow(ctx, `SELECT v FROM kv WHERE k = $1`, k2).Scan(&v)
	}); !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("stable range fell back: %v", err)
	}
}

func TestRouterPolls(t *testing.T) {
	s, _ := newControl(t)
	register(t, s, "a", "b")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	m := NewMetrics(prometheus.NewRegistry())
	r, err := New(testCtx(t), s, nil, Options{PollInterval: 20 * time.Millisecond, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan struct{})
	go func() { r.poll(ctx); close(done) }() // polling alone, no listener
	defer func() { cancel(); <-done }()
	mustPublish(t, s, 1, mustTopo(t, single("b"), nil, "move all to b"))
	waitFor(t, func() bool { return r.Version() == 2 })
	if n := counterValue(t, m.refreshes.WithLabelValues("poll")); n != 1 {
		t.Fatalf("%g versions adopted by polling, want 1", n)
	}
}

// Keyspaces have their own versions: publishing in one changes nothing in
// the other, and a router of one keyspace adopts only its own versions
// (another keyspace's NOTIFY is skipped, not reloaded).
func TestKeyspacesHaveTheirOwnVersions(t *testing.T) {
	s, _ := newControl(t)
	register(t, s, "a", "b")
	other := s.In("pay")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	mustPublish(t, other, 0, mustTopo(t, single("b"), nil, "initial pay"))
	m := NewMetrics(prometheus.NewRegistry())
	r, err := New(testCtx(t), other, nil, Options{PollInterval: -1, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, func() bool { return counterValue(t, m.stale) >= 1 })
	mustPublish(t, s, 1, mustTopo(t, single("b"), nil, "default moves to b"))
	mustPublish(t, s, 2, mustTopo(t, single("a"), nil, "default back to a"))
	mustPublish(t, other, 1, mustTopo(t, single("a"), nil, "pay moves to a"))
	waitFor(t, func() bool { return r.Version() == 2 })
	if shard, v, err := r.Route(int64(7)); err != nil || shard != "a" || v != 2 {
		t.Fatalf("pay router: Route = %s, v%d, %v; want a at v2", shard, v, err)
	}
	if n := counterValue(t, m.refreshes.WithLabelValues("notify")); n != 1 {
		t.Fatalf("%g versions adopted through NOTIFY by the pay router, want 1 (its own)", n)
	}
	def, err := s.Current(testCtx(t))
	if err != nil || def.Version != 3 || def.Reason != "default back to a" {
		t.Fatalf("default keyspace: v%d %q %v", def.Version, def.Reason, err)
	}
	if h, err := other.History(testCtx(t), 0); err != nil || len(h) != 2 {
		t.Fatalf("pay history: %d versions, %v; want 2", len(h), err)
	}
}

func TestToken(t *testing.T) {
	u := [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11}
	tests := []struct {
		kt      ring.KeyType
		key     any
		want    int64
		wantErr bool
	}{
		{ring.KeyInt, int64(42), ring.TokenInt64(42), false},
		{ring.KeyInt, 42, ring.TokenInt64(42), false},
		{ring.KeyInt, int32(-7), ring.TokenInt64(-7), false},
		{ring.KeyInt, "42", ring.TokenInt64(42), false},
		{ring.KeyInt, Token(99), 99, false},
		{ring.KeyInt, "x", 0, true},
		{ring.KeyInt, u, 0, true},
		{ring.KeyInt, uint64(math.MaxUint64), 0, true},
		{ring.KeyInt, 1.5, 0, true},
		{ring.KeyText, "alice", ring.TokenText("alice"), false},
		{ring.KeyText, 42, 0, true},
		{ring.KeyUUID, u, ring.TokenUUID(u), false},
		{ring.KeyUUID, pgtype.UUID{Bytes: u, Valid: true}, ring.TokenUUID(u), false},
		{ring.KeyUUID, pgtype.UUID{}, 0, true},
		{ring.KeyUUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", ring.TokenUUID(u), false},
	}
	for _, tt := range tests {
		r := &Router{opts: Options{KeyType: tt.kt}}
		got, err := r.Token(tt.key)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s key %#v: token %d err %v; want %d, error %v", tt.kt, tt.key, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestIsFenceError(t *testing.T) {
	fence := &pgconn.PgError{Code: FenceSQLState, Message: "fenced"}
	if !IsFenceError(fence) || !IsFenceError(errors.Join(errors.New("ctx"), fence)) {
		t.Error("fence error not recognised")
	}
	if IsFenceError(&pgconn.PgError{Code: "23505"}) || IsFenceError(errors.New("RSF01")) || IsFenceError(nil) {
		t.Error("non-fence error recognised as one")
	}
}
