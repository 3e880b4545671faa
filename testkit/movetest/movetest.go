// Package movetest sets up whole moves on real servers for the integration
// tests of cutover and rollback: two shards and a control database, a
// topology published there, a table set, a ledger of writes made through the
// router, and the steps of a move (JOINING, copy, CDC, cutover, GRACE).
package movetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

// Schema of both shards: kv is what the writers write; items is a second
// table of the set (key column k) that moves with it.
const Schema = `
CREATE TABLE kv (k bigint PRIMARY KEY, v text NOT NULL, n bigint NOT NULL DEFAULT 0);
CREATE TABLE items (id bigint PRIMARY KEY, k bigint NOT NULL, note text);`

// KV is the writers' table.
var KV = ledger.Table{Name: "kv", Key: "k", Val: "v"}

// Old gives a (−6e18, …] style ring to two shards: a owns the wrap and
// (−2e18, 2e18]; b owns (−6e18, −2e18] and (2e18, 6e18].
func Old() *ring.Ring {
	return ring.MustNew([]ring.VNode{{Token: -6e18, Shard: "a"}, {Token: -2e18, Shard: "b"}, {Token: 2e18, Shard: "a"}, {Token: 6e18, Shard: "b"}})
}

// Moving is the range the tests move from a to b: part of an a vnode, so the
// plan adds tokens, and b is a live shard owning other ranges.
var Moving = ring.Range{Lo: -1e18, Hi: 1.5e18}

// Env is one move's world.
type Env struct {
	Ctl        *pgtest.DB
	Store      *topology.Store
	Fences     fence.Control // Store and the control pool
	DBs        map[string]*pgtest.DB
	Super      map[string]*pgtest.DB // the shards as the superuser, whoever runs the move
	Pools      map[string]*pgxpool.Pool
	Set        tableset.Set // as read from b, the target
	SrcSet     tableset.Set // as read from a
	Old        *ring.Ring
	New        *ring.Ring
	Move       cutover.Move
	Ledger     *ledger.Ledger
	Keys       []int64 // every key of kv; MovingKeys are those in Move.Ranges
	MovingKeys []int64
	Initial    topology.Topology // version 1
	extra      []tableset.TableSpec

	L0      pglogrepl.LSN
	Fwd     *cdc.Stream
	stopFwd func() error
	RevL0   pglogrepl.LSN
	Rev     *cdc.Stream
	stopRev func() error
}

// Ctx is a context bounded for a test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// New creates the shards (a on server 0, b on server 1, control on server 0),
// the schema, keys 1..nKeys on their owners under the old ring (recorded in
// the ledger as acknowledged), and publishes topology version 1.
func New(t testing.TB, id string, nKeys int, opts ...Option) *Env {
	t.Helper()
	ctx := Ctx(t)
	e := &Env{DBs: map[string]*pgtest.DB{"a": pgtest.NewDB(t, 0), "b": pgtest.NewDB(t, 1)}, Ctl: pgtest.NewDB(t, 0), Ledger: ledger.New(), Old: Old()}
	e.Pools = map[string]*pgxpool.Pool{}
	e.Super = map[string]*pgtest.DB{"a": e.DBs["a"], "b": e.DBs["b"]}
	for n, db := range e.DBs {
		db.Exec(t, Schema)
		e.Pools[n] = db.Pool
	}
	for _, o := range opts {
		o(t, e)
	}
	// reshard's own sessions run under internal/pgsession's settings, as
	// the worker's pools do; the writers' (e.Pools) under the servers'.
	for n, db := range e.DBs {
		e.DBs[n] = db.Pinned(t)
	}
	spec := tableset.Spec{Name: "app", Tables: append([]tableset.TableSpec{{Table: "kv", KeyColumn: "k"}, {Table: "items", KeyColumn: "k"}}, e.extra...)}
	var err error
	if e.Set, err = tableset.Introspect(ctx, e.DBs["b"].Pool, spec, "b"); err != nil {
		t.Fatal(err)
	}
	if e.SrcSet, err = tableset.Introspect(ctx, e.DBs["a"].Pool, spec, "a"); err != nil {
		t.Fatal(err)
	}
	var moves []ring.Move
	if e.New, moves, err = ring.PlanMove(e.Old, Moving, "b"); err != nil {
		t.Fatal(err)
	}
	if len(moves) != 1 || moves[0].From != "a" {
		t.Fatalf("plan: %v", moves)
	}
	e.Move = cutover.Move{ID: id, From: "a", To: "b", Source: e.DBs["a"].Pool, Target: e.DBs["b"].Pool, Set: e.Set, Ranges: []ring.Range{moves[0].Range}}
	for k := int64(1); k <= int64(nKeys); k++ {
		e.Keys = append(e.Keys, k)
		owner := e.Old.Owner(ring.TokenInt64(k))
		e.DBs[owner].Exec(t, "INSERT INTO kv VALUES ($1, $2)", k, fmt.Sprintf("seed-%d", k))
		e.DBs[owner].Exec(t, "INSERT INTO items VALUES ($1, $2, 'seed'), ($1 + 1000000, $2, 'seed')", k, k)
		e.Ledger.Ack(k, ledger.Value{V: fmt.Sprintf("seed-%d", k)})
		if ring.ContainsAny(e.Move.Ranges, ring.TokenInt64(k)) {
			e.MovingKeys = append(e.MovingKeys, k)
		}
	}
	if err := topology.Migrate(ctx, e.Ctl.Pool); err != nil {
		t.Fatal(err)
	}
	e.Store = topology.NewStore(e.Ctl.Pool)
	e.Fences = fence.Control{Pool: e.Ctl.Pool, Store: e.Store}
	for n, db := range e.DBs {
		ref := topology.ConnRef{Host: "127.0.0.1", Port: uint16(db.Server.Port), Database: db.Name, User: "postgres"}
		if err := e.Store.RegisterShard(ctx, topology.Shard{Name: n, Conn: ref, State: topology.ShardActive}); err != nil {
			t.Fatal(err)
		}
	}
	v1, err := topology.New(e.Old, nil, "initial")
	if err != nil {
		t.Fatal(err)
	}
	if e.Initial, err = e.Store.Publish(ctx, 0, v1); err != nil {
		t.Fatal(err)
	}
	return e
}

// Option changes an Env once its databases and tables exist, before
// anything else is made in them.
type Option func(testing.TB, *Env)

// Table adds a table to both shards and to the move's table set: ddl
// creates it, key is its key column. Give it before LeastPrivileged, which
// hands kv and items only to the tables' owner.
func Table(ddl, table, key string) Option {
	return func(t testing.TB, e *Env) {
		for _, db := range e.DBs {
			db.Exec(t, ddl)
		}
		e.extra = append(e.extra, tableset.TableSpec{Table: table, KeyColumn: key})
	}
}

func (e *Env) extraNames() []string {
	var names []string
	for _, ts := range e.extra {
		names = append(names, ts.Table)
	}
	return names
}

// LeastPrivileged makes the move run as a role without superuser, granted
// only what deploy/reshard-role.sql grants (e.DBs, e.Ctl and the Move's pools
// connect as it), and the writers write as the role owning the tables
// (e.Pools).
func LeastPrivileged() Option {
	return func(t testing.TB, e *Env) {
		reshard, app := pgtest.RoleName("reshard"), pgtest.RoleName("app")
		all := []*pgtest.DB{e.Ctl, e.DBs["a"], e.DBs["b"]}
		pgtest.CreateRole(t, app, all...)
		pgtest.CreateRole(t, reshard, all...)
		e.Ctl.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "control": "1", "readers": app})
		e.Ctl = e.Ctl.As(t, reshard)
		for n, db := range e.DBs {
			for _, tb := range append([]string{"kv", "items"}, e.extraNames()...) {
				db.Exec(t, "ALTER TABLE "+pgx.Identifier{tb}.Sanitize()+" OWNER TO "+pgx.Identifier{app}.Sanitize())
			}
			db.Psql(t, "deploy/reshard-role.sql", map[string]string{"role": reshard, "owners": app})
			e.DBs[n], e.Pools[n] = db.As(t, reshard), db.As(t, app).Pool
		}
	}
}

// Router returns a router over both shards; with run it follows NOTIFY
// until the test ends, without it stays on the version it loaded until a
// fence error makes it look (a stale router).
func (e *Env) Router(t testing.TB, run bool) *router.Router {
	t.Helper()
	r, err := router.New(Ctx(t), e.Store, e.Pools, router.Options{PollInterval: -1, FenceRetries: 12})
	if err != nil {
		t.Fatal(err)
	}
	if run {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { r.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return r
}

// Writers starts ledger writers through r on every key (moving keys and
// others alike) and returns a stop function that waits for them and fails
// the test if a write failed other than by the test's end.
func (e *Env) Writers(t testing.TB, r *router.Router, seed uint64) (stop func() *ledger.Stats) {
	ctx, cancel := context.WithCancel(context.Background())
	// Half of the writes go to moving keys.
	keys := slices.Clone(e.Keys)
	for len(keys) < 2*len(e.Keys) && len(e.MovingKeys) > 0 {
		keys = append(keys, e.MovingKeys...)
	}
	keys = keys[:min(len(keys), 2*len(e.Keys))]
	slices.Sort(keys)
	keys = slices.Compact(keys) // one writer per key
	st := ledger.Write(ctx, r, e.Ledger, ledger.WriterOptions{Table: KV, Keys: keys, Workers: 6, Seed: seed, Pause: 2 * time.Millisecond})
	stopped := false
	stop = func() *ledger.Stats {
		if !stopped {
			stopped = true
			cancel()
			st.Wait()
		}
		return st
	}
	t.Cleanup(func() { stop() })
	return stop
}

// Begin is JOINING: the ranges published as migrating, both shards'
// fences and TRUNCATE guards reconciled with that topology (the target
// fenced on the moving ranges), publication and slot on the source.
func (e *Env) Begin(t testing.TB) {
	t.Helper()
	if _, err := topology.Begin(e.New, e.Move.Ranges, "a", "b", "begin move "+e.Move.ID).Publish(Ctx(t), e.Store); err != nil {
		t.Fatal(err)
	}
	e.join(t)
}

// BeginMigration is JOINING as a migration's workflow does it: the plan
// stored and the migrating topology published by the migration (its start,
// topology.StartMigration), then what Begin does. The move's id must be
// the plan's (topology.MoveID(migration, 1)).
func (e *Env) BeginMigration(t testing.TB, migration string) {
	t.Helper()
	ctx := Ctx(t)
	if id := topology.MoveID(migration, 1); e.Move.ID != id {
		t.Fatalf("move id %s, want the plan's %s", e.Move.ID, id)
	}
	moves := []ring.Move{{Range: e.Move.Ranges[0], From: "a", To: "b"}}
	if err := e.Store.SavePlan(ctx, topology.Plan{MigrationID: migration, FromVersion: e.Initial.Version, Before: e.Old, After: e.New, Moves: moves}); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.StartMigration(ctx, e.Store, migration, "move", e.Initial.Version, e.Old, e.New,
		[]topology.MoveRanges{{Source: "a", Target: "b", Ranges: e.Move.Ranges}}, nil); err != nil {
		t.Fatal(err)
	}
	e.join(t)
}

// join is JOINING (join.Run): the fences and guards the topology wants on
// both shards, the checkpoint schema, the publication and the slot.
func (e *Env) join(t testing.TB) {
	t.Helper()
	r, err := join.Run(Ctx(t), e.Move, join.Options{Fences: e.Fences, SourceSet: e.SrcSet, Replication: join.ReplicationDSN(e.DBs["a"].ReplicationDSN(), "a")})
	if err != nil {
		t.Fatal(err)
	}
	e.L0 = r.L0
}

// Copy runs the backfill.
func (e *Env) Copy(t testing.TB) {
	t.Helper()
	if _, err := backfill.Copy(Ctx(t), e.Move.Source, e.Move.Target, backfill.Options{Move: e.Move.ID, Set: e.Set, Ranges: e.Move.Ranges, ChunkRows: 500}); err != nil {
		t.Fatal(err)
	}
}

// ForwardOptions are the forward stream's options.
func (e *Env) ForwardOptions() cdc.Options {
	names, _ := cdc.NamesFor(e.Move.ID)
	return cdc.Options{Move: e.Move.ID, SourceReplicationDSN: e.DBs["a"].ReplicationDSN(), SourceDSN: e.DBs["a"].DSN,
		TargetDSN: e.DBs["b"].DSN + "&application_name=reshard_fwd", Slot: names.Slot, Publication: names.Publication, Origin: names.Origin,
		StartLSN: e.L0, Set: e.Set, Ranges: e.Move.Ranges, BatchDelay: 20 * time.Millisecond, StatusInterval: 500 * time.Millisecond}
}

// ReverseOptions are the GRACE stream's options.
func (e *Env) ReverseOptions(t testing.TB) cdc.Options {
	t.Helper()
	o, err := cdc.ReverseOptions(e.ForwardOptions(), e.DBs["a"].DSN+"&application_name=reshard_rev", e.DBs["b"].ReplicationDSN(), e.SrcSet, e.RevL0)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func run(t testing.TB, o cdc.Options) (*cdc.Stream, func() error) {
	t.Helper()
	s, err := cdc.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
			if errors.Is(runErr, context.Canceled) {
				runErr = nil
			}
		}
		return runErr
	}
	t.Cleanup(func() { stop() })
	return s, stop
}

// StartForward runs the forward stream.
func (e *Env) StartForward(t testing.TB) { e.Fwd, e.stopFwd = run(t, e.ForwardOptions()) }

// StopForward stops it, failing the test if it had stopped on an error.
func (e *Env) StopForward(t testing.TB) {
	t.Helper()
	if err := e.stopFwd(); err != nil {
		t.Fatalf("forward stream: %v", err)
	}
}

// StartReverse runs the reverse stream.
func (e *Env) StartReverse(t testing.TB) { e.Rev, e.stopRev = run(t, e.ReverseOptions(t)) }

// StopReverse stops it.
func (e *Env) StopReverse(t testing.TB) {
	t.Helper()
	if err := e.stopRev(); err != nil {
		t.Fatalf("reverse stream: %v", err)
	}
}

// Drain emits a marker on db and waits until s applied it.
func Drain(t testing.TB, db *pgtest.DB, s *cdc.Stream) {
	t.Helper()
	payload := fmt.Sprintf("test-drain-%d", time.Now().UnixNano())
	db.Exec(t, "SELECT pg_logical_emit_message(true, $1, $2::text)", cdc.MarkerPrefix, payload)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.DrainToMarker(ctx, payload); err != nil {
		t.Fatalf("drain to marker: %v", err)
	}
}

// CutoverActions are the forward cutover's real actions.
func (e *Env) CutoverActions(t testing.TB) *cutover.PG {
	t.Helper()
	return cutover.NewPG(e.Move, e.Fwd, e.Fences, topology.CutOver(e.New, e.Move.Ranges, "a", "b", "cutover of move "+e.Move.ID), e.Journal())
}

// Journal is the forward cutover's journal.
func (e *Env) Journal() cutover.PGJournal {
	return cutover.PGJournal{Pool: e.Ctl.Pool, Move: e.Move.ID}
}

// Cutover prepares the reverse slot (before the pause) and runs the cutover.
func (e *Env) Cutover(t testing.TB, budget time.Duration) (cutover.Result, error) {
	t.Helper()
	ctx := Ctx(t)
	var err error
	if _, e.RevL0, err = join.Reverse(ctx, e.Move, e.DBs["b"].ReplicationDSN()); err != nil {
		t.Fatal(err)
	}
	return cutover.Run(ctx, e.CutoverActions(t), e.Journal(), cutover.Options{Budget: budget})
}

// ToGrace runs a move up to GRACE under the caller's writers: JOINING, copy,
// forward CDC caught up, cutover, forward stream stopped, reverse started.
func (e *Env) ToGrace(t testing.TB) cutover.Result {
	t.Helper()
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	Drain(t, e.DBs["a"], e.Fwd)
	res, err := e.Cutover(t, 2*time.Second)
	if err != nil {
		t.Fatalf("cutover: %v", err)
	}
	e.StopForward(t)
	e.StartReverse(t)
	return res
}

// CheckLedger checks every key on its owner under the current topology.
func (e *Env) CheckLedger(t testing.TB) {
	t.Helper()
	ctx := Ctx(t)
	cur, err := e.Store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.CheckOn(t, func(k int64) string { return cur.Ring.Owner(ring.TokenInt64(k)) })
}

// CheckOn checks every key on the shard owner names ("" skips the key).
func (e *Env) CheckOn(t testing.TB, owner func(int64) string) {
	t.Helper()
	bad, err := e.Ledger.Check(Ctx(t), KV, e.Pools, owner)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range bad {
		if i == 10 {
			t.Errorf("... and %d more", len(bad)-10)
			break
		}
		t.Errorf("ledger: %s", m)
	}
	if len(bad) > 0 {
		t.FailNow()
	}
}

// CountIn counts the rows of table on shard whose key is in ranges.
func (e *Env) CountIn(t testing.TB, shard, table string, ranges []ring.Range) int64 {
	t.Helper()
	for _, tb := range e.Set.Tables {
		if tb.Name == table {
			return e.DBs[shard].QueryInt64(t, "SELECT count(*) FROM "+tb.Quoted()+" WHERE "+ring.Predicate(tb.TokenSQL(""), ranges))
		}
	}
	t.Fatalf("no table %s", table)
	return 0
}

// CheckFences fails the test unless every table of the set on each named
// shard is fenced on exactly the given ranges, with its fence trigger on,
// its functions compiling its registry row, and its TRUNCATE guard as guard
// says.
func (e *Env) CheckFences(t testing.TB, guard bool, want map[string][]ring.Range) {
	t.Helper()
	for shard, rs := range want {
		have, err := fence.Inspect(Ctx(t), e.DBs[shard].Pool, e.Set)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range have {
			if !h.Trigger || len(h.Problems) > 0 || !slices.Equal(ring.Normalize(h.Ranges), ring.Normalize(rs)) || h.Guard != guard {
				t.Errorf("%s %s: trigger %v (problems %v), fenced %v, guard %v; want fenced %v, guard %v", shard, h.Table, h.Trigger, h.Problems, h.Ranges, h.Guard, ring.Normalize(rs), guard)
			}
		}
	}
}
