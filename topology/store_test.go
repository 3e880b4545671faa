package topology

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
)

func TestMigrateIdempotentAndConcurrent(t *testing.T) {
	s, db := newControl(t) // first run
	ctx := testCtx(t)
	if err := Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = Migrate(ctx, db.Pool) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate %d: %v", i, err)
		}
	}
	if n := db.QueryInt64(t, `SELECT count(*) FROM reshard.topology_schema`); n != int64(len(migrations)) {
		t.Fatalf("%d steps recorded, want %d", n, len(migrations))
	}
	register(t, s, "a")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	if err := Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("migrate over data: %v", err)
	}
	if _, err := s.Current(ctx); err != nil {
		t.Fatalf("data lost by migrate: %v", err)
	}
}

func TestShardsTableHasNoPasswordColumn(t *testing.T) {
	_, db := newControl(t)
	n := db.QueryInt64(t, `SELECT count(*) FROM information_schema.columns
WHERE table_schema = 'reshard' AND (column_name ILIKE '%pass%' OR column_name ILIKE '%secret%' OR column_name ILIKE '%dsn%')`)
	if n != 0 {
		t.Fatalf("%d password-like columns in schema reshard", n)
	}
}

func TestVersionsAreAppendOnly(t *testing.T) {
	s, db := newControl(t)
	register(t, s, "a", "b")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	mustPublish(t, s, 1, mustTopo(t, single("b"), nil, "second"))
	ctx := testCtx(t)
	for _, sql := range []string{
		`UPDATE reshard.topology_versions SET reason = 'rewritten' WHERE version = 1`,
		`DELETE FROM reshard.topology_versions WHERE version = 2`,
		`TRUNCATE reshard.topology_versions`,
		// gaps and rewrites of history through INSERT
		`INSERT INTO reshard.topology_versions (version, ring, ranges, reason) SELECT 7, ring, ranges, 'gap' FROM reshard.topology_versions WHERE version = 1`,
		`INSERT INTO reshard.topology_versions (version, ring, ranges, reason) SELECT 1, ring, ranges, 'again' FROM reshard.topology_versions WHERE version = 1`,
	} {
		_, err := db.Pool.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != pgerr.CodeRestrictViolation && pgErr.Code != pgerr.CodeUniqueViolation) {
			t.Errorf("%s: err %v, want it refused", sql, err)
		}
	}
	if n := db.QueryInt64(t, `SELECT count(*) FROM reshard.topology_versions WHERE reason IN ('initial', 'second')`); n != 2 {
		t.Fatalf("history changed: %d of 2 versions left", n)
	}
}

func TestPublishLoadRoundTrip(t *testing.T) {
	s, _ := newControl(t)
	ctx := testCtx(t)
	if _, err := s.Current(ctx); !errors.Is(err, ErrNoTopology) {
		t.Fatalf("empty control DB: %v, want ErrNoTopology", err)
	}
	register(t, s, "a", "b", "c")
	mig := []RangeState{{Range: ring.Range{Lo: 1000, Hi: 5000}, Owner: "b", Status: Migrating, From: "b", To: "c"}}
	in := mustTopo(t, halves("a", "b"), mig, "split b").WithMigrationID("m-1")
	if _, err := s.Publish(ctx, 0, Topology{Ring: in.Ring}); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("publish without reason: %v", err)
	}
	got := mustPublish(t, s, 0, in)
	if got.Version != 1 || got.CreatedAt.IsZero() {
		t.Fatalf("published %+v", got)
	}
	cur, err := s.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Version != 1 || cur.Reason != "split b" || cur.MigrationID != "m-1" || !cur.CreatedAt.Equal(got.CreatedAt) {
		t.Fatalf("loaded %+v", cur)
	}
	if a, b := cur.Ring.VNodes(), in.Ring.VNodes(); len(a) != len(b) || a[0] != b[0] || a[1] != b[1] {
		t.Fatalf("ring %v, want %v", a, b)
	}
	if m := cur.Migrating(); len(m) != 1 || m[0] != mig[0] {
		t.Fatalf("migrating %v, want %v", m, mig)
	}
	mustPublish(t, s, 1, mustTopo(t, []ring.VNode{{Token: 0, Shard: "a"}, {Token: 5000, Shard: "c"}, {Token: ring.MaxToken, Shard: "b"}}, nil, "cutover"))
	v1, err := s.Load(ctx, 1)
	if err != nil || v1.Reason != "split b" {
		t.Fatalf("load v1: %+v %v", v1, err)
	}
	if _, err := s.Load(ctx, 9); err == nil {
		t.Fatal("loaded a version that does not exist")
	}
	h, err := s.History(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Version != 2 || h[0].Shards != 3 || h[0].VNodes != 3 || h[0].Migrating != 0 ||
		h[1].Version != 1 || h[1].Migrating != 1 || h[1].MigrationID != "m-1" {
		t.Fatalf("history %+v", h)
	}
	if h, _ := s.History(ctx, 1); len(h) != 1 || h[0].Version != 2 {
		t.Fatalf("history limit 1: %+v", h)
	}
}

func TestPublishRefusesUnregisteredShards(t *testing.T) {
	s, _ := newControl(t)
	register(t, s, "a")
	_, err := s.Publish(testCtx(t), 0, mustTopo(t, halves("a", "ghost"), nil, "initial"))
	if err == nil || !strings.Contains(err.Error(), "ghost") || !strings.Contains(err.Error(), "RegisterShard") {
		t.Fatalf("err = %v, want it to name the unregistered shard and the fix", err)
	}
}

// Two publishers on the same expected version, released at the same moment
// from behind a lock: exactly one wins, the other gets ErrVersionConflict, and
// listeners hear exactly the versions that exist.
func TestPublishCompareAndSet(t *testing.T) {
	s, db := newControl(t)
	register(t, s, "a", "b", "c")
	listener := db.Conn(t)
	ctx := testCtx(t)
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{NotifyChannel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))

	// Hold the publishers' lock so that both are inside Publish, queued, when
	// it is released.
	blocker, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `LOCK TABLE reshard.topology_versions IN SHARE ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		topo Topology
		err  error
	}
	results := make(chan result, 2)
	for _, owner := range []string{"b", "c"} {
		go func() {
			topo, err := s.Publish(ctx, 1, mustTopo(t, single(owner), nil, "move to "+owner))
			results <- result{topo, err}
		}()
	}
	waitFor(t, func() bool {
		return db.QueryInt64(t, `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'reshard.topology_versions'::regclass`) == 2
	})
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var won, lost int
	var winner Topology
	for range 2 {
		r := <-results
		var vc *VersionConflictError
		switch {
		case r.err == nil:
			won++
			winner = r.topo
		case errors.Is(r.err, ErrVersionConflict) && errors.As(r.err, &vc):
			lost++
			if vc.Have != 2 || vc.Want != 1 {
				t.Errorf("conflict have=%d want=%d, expected have=2 want=1", vc.Have, vc.Want)
			}
		default:
			t.Errorf("unexpected error: %v", r.err)
		}
	}
	if won != 1 || lost != 1 {
		t.Fatalf("%d won, %d lost; want exactly one of each", won, lost)
	}
	cur, err := s.Current(ctx)
	if err != nil || cur.Version != 2 || cur.Reason != winner.Reason {
		t.Fatalf("current %+v %v, want the winner %q at v2", cur, err, winner.Reason)
	}
	for _, want := range []string{"1", "2"} {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil || n.Channel != NotifyChannel || n.Payload != want {
			t.Fatalf("notification %+v %v, want %s", n, err, want)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := listener.WaitForNotification(wctx); err == nil {
		t.Fatalf("extra notification %+v: the losing publish notified", n)
	}
}

func TestPublishStaleExpectedVersion(t *testing.T) {
	s, _ := newControl(t)
	register(t, s, "a")
	mustPublish(t, s, 0, mustTopo(t, single("a"), nil, "initial"))
	mustPublish(t, s, 1, mustTopo(t, single("a"), nil, "again"))
	_, err := s.Publish(testCtx(t), 1, mustTopo(t, single("a"), nil, "stale"))
	var vc *VersionConflictError
	if !errors.As(err, &vc) || vc.Have != 2 || vc.Want != 1 || !strings.Contains(err.Error(), "reload") {
		t.Fatalf("err = %v, want a conflict have=2 want=1 saying what to do", err)
	}
}

func TestShardRegistry(t *testing.T) {
	s, _ := newControl(t)
	ctx := testCtx(t)
	conn, err := ParseConnRef("postgres://app:hunter2@db1:6432/orders")
	if err != nil {
		t.Fatal(err)
	}
	sh := Shard{Name: "s1", Conn: conn, FailureDomain: "az-1", Weight: 2, State: ShardJoining}
	if err := s.RegisterShard(ctx, sh); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterShard(ctx, sh); err != nil {
		t.Fatalf("re-registering the same shard: %v", err)
	}
	other := sh
	other.Conn.Host = "db9"
	if err := s.RegisterShard(ctx, other); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("re-registering with another host: %v", err)
	}
	if err := s.RegisterShard(ctx, Shard{Name: "s2", Conn: conn, State: "gone"}); err == nil {
		t.Fatal("registered a shard in an unknown state")
	}
	if err := s.RegisterShard(ctx, Shard{Name: "s3", Conn: ConnRef{Host: "db1"}, State: ShardActive}); err == nil {
		t.Fatal("registered a shard without port, dbname, user")
	}
	got, err := s.Shard(ctx, "s1")
	if err != nil || got.Conn != conn || got.Weight != 2 || got.FailureDomain != "az-1" || got.State != ShardJoining {
		t.Fatalf("shard %+v %v", got, err)
	}
	steps := []struct {
		to Shard
		ok bool
	}{
		{Shard{State: ShardActive}, true},
		{Shard{State: ShardJoining}, false},
		{Shard{State: ShardLeaving}, true},
		{Shard{State: ShardLeaving}, true}, // no-op
		{Shard{State: ShardActive}, true},
	}
	for _, st := range steps {
		err := s.SetShardState(ctx, "s1", st.to.State)
		if (err == nil) != st.ok {
			t.Fatalf("-> %s: err %v, want ok=%v", st.to.State, err, st.ok)
		}
	}
	if err := s.SetShardState(ctx, "nope", ShardActive); err == nil {
		t.Fatal("set state of an unregistered shard")
	}
	list, err := s.Shards(ctx)
	if err != nil || len(list) != 1 || list[0].State != ShardActive {
		t.Fatalf("shards %+v %v", list, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
