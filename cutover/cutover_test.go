package cutover

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

// cutoverEnv is a source and a target shard with users fenced on the target
// (as JOINING leaves them) and a control database for the journal and a
// stand-in topology row.
type cutoverEnv struct {
	src, dst, ctl *pgtest.DB
	set           tableset.Set
	ranges        []ring.Range
	journal       PGJournal
	fences        fence.Control
	target        *ring.Ring
}

// newCutoverEnv: shard src owns the whole token space in topology v1 and
// (0, MaxToken] is migrating to dst (published as v2, JOINING done); the
// cutover publishes v3.
func newCutoverEnv(t *testing.T) *cutoverEnv {
	t.Helper()
	ctx := context.Background()
	e := &cutoverEnv{src: pgtest.NewDB(t, 0), dst: pgtest.NewDB(t, 1), ctl: pgtest.NewDB(t, 0)}
	e.set = usersSet(t, e.src)
	usersSet(t, e.dst)
	e.ranges = []ring.Range{{Lo: 0, Hi: ring.MaxToken}}
	if err := topology.Migrate(ctx, e.ctl.Pool); err != nil {
		t.Fatal(err)
	}
	store := topology.NewStore(e.ctl.Pool)
	e.fences = fence.Control{Pool: e.ctl.Pool, Store: store}
	for n, db := range map[string]*pgtest.DB{"src": e.src, "dst": e.dst} {
		ref := topology.ConnRef{Host: "127.0.0.1", Port: uint16(db.Server.Port), Database: db.Name, User: "postgres"}
		if err := store.RegisterShard(ctx, topology.Shard{Name: n, Conn: ref, State: topology.ShardActive}); err != nil {
			t.Fatal(err)
		}
	}
	v1, err := topology.New(ring.MustNew([]ring.VNode{{Token: 0, Shard: "src"}, {Token: ring.MaxToken, Shard: "src"}}), nil, "initial")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Publish(ctx, 0, v1); err != nil {
		t.Fatal(err)
	}
	e.target = ring.MustNew([]ring.VNode{{Token: 0, Shard: "src"}, {Token: ring.MaxToken, Shard: "dst"}})
	if _, err := topology.Begin(e.target, e.ranges, "src", "dst", "begin").Publish(ctx, store); err != nil {
		t.Fatal(err)
	}
	for n, db := range map[string]*pgtest.DB{"src": e.src, "dst": e.dst} {
		if _, err := fence.Reconcile(ctx, db.Pool, n, e.set, e.fences); err != nil {
			t.Fatal(err)
		}
	}
	e.journal = PGJournal{Pool: e.ctl.Pool, Move: "m1"}
	return e
}

func (e *cutoverEnv) actions() *PG { return e.actionsOf(e.journal) }

// actionsOf are the actions of the attempt of journal j.
func (e *cutoverEnv) actionsOf(j PGJournal) *PG {
	m := Move{ID: "m1", From: "src", To: "dst", Source: e.src.Pool, Target: e.dst.Pool, Set: e.set, Ranges: e.ranges}
	p := NewPG(m, nil, e.fences, topology.CutOver(e.target, e.ranges, "src", "dst", "cutover of m1"), j)
	p.DrainFunc = func(context.Context, string, time.Duration) error { return nil }
	return p
}

func (e *cutoverEnv) version(t *testing.T) int64 {
	cur, err := e.fences.Store.Current(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cur.Version
}

// keyIn returns a key whose token lies in (0, MaxToken] or not.
func keyIn(t *testing.T, db *pgtest.DB, inHigh bool) int64 {
	for k := int64(1); ; k++ {
		if (tokenOf(t, db, k) > 0) == inHigh {
			return k
		}
	}
}

func TestCutoverMovesOwnershipAndMeasuresThePause(t *testing.T) {
	ctx := context.Background()
	e := newCutoverEnv(t)
	moving := keyIn(t, e.src, true)
	res, err := Run(ctx, e.actions(), e.journal, Options{Budget: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != 3 || res.WritePause <= 0 || res.WritePause > 2*time.Second || len(res.Steps) != len(Steps) {
		t.Fatalf("result %+v", res)
	}
	if _, err := e.src.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving); !router.IsFenceError(err) {
		t.Fatalf("write of a moved key on the old owner: %v", err)
	}
	if _, err := e.dst.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving); err != nil {
		t.Fatalf("write of a moved key on the new owner: %v", err)
	}
	if last, _ := e.journal.Last(ctx); last != StepDone {
		t.Fatalf("journal ends with %q", last)
	}
}

func TestCutoverOverBudgetAbortsAndUnfencesSource(t *testing.T) {
	ctx := context.Background()
	e := newCutoverEnv(t)
	moving := keyIn(t, e.src, true)
	long := e.src.Conn(t)
	if _, err := long.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM users"); err != nil {
		t.Fatal(err)
	}
	defer long.Exec(ctx, "ROLLBACK")
	_, err := Run(ctx, e.actions(), e.journal, Options{Budget: 300 * time.Millisecond})
	var obe *fence.OverBudgetError
	if !errors.Is(err, ErrAborted) || !errors.As(err, &obe) {
		t.Fatalf("cutover with a long transaction open: %v", err)
	}
	if !strings.Contains(err.Error(), "pid") {
		t.Fatalf("abort does not name the blocking session: %v", err)
	}
	if _, err := e.src.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving); err != nil {
		t.Fatalf("source still fenced after abort: %v", err)
	}
	if v := e.version(t); v != 2 {
		t.Fatalf("topology published by an aborted cutover")
	}
	if last, _ := e.journal.Last(ctx); last != StepAbort {
		t.Fatalf("journal ends with %q", last)
	}
}

func TestResumeAfterCrash(t *testing.T) {
	ctx := context.Background()
	for _, published := range []bool{false, true} {
		e := newCutoverEnv(t)
		a := e.actions()
		moving := keyIn(t, e.src, true)
		// A crash right after fencing the source (and, in the second case,
		// right after publishing).
		if err := e.journal.Record(ctx, StepFenceSource, ""); err != nil {
			t.Fatal(err)
		}
		if err := a.FenceSource(ctx); err != nil {
			t.Fatal(err)
		}
		if published {
			if _, err := a.Publish(ctx); err != nil {
				t.Fatal(err)
			}
		}
		done, err := Resume(ctx, a, e.journal)
		if err != nil || done != published {
			t.Fatalf("published=%v: Resume = %v, %v", published, done, err)
		}
		_, srcErr := e.src.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving)
		_, dstErr := e.dst.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving)
		if published && (!router.IsFenceError(srcErr) || dstErr != nil) {
			t.Fatalf("resumed forward: source err %v, target err %v", srcErr, dstErr)
		}
		if !published && (srcErr != nil || !router.IsFenceError(dstErr)) {
			t.Fatalf("undone: source err %v, target err %v", srcErr, dstErr)
		}
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	var out bytes.Buffer
	d := DryRun{W: &out, Move: "m1", Source: "shard1", Target: "shard5", Ranges: []ring.Range{{Lo: 1, Hi: 5}}, Version: 7}
	res, err := Run(context.Background(), d, NopJournal{}, Options{})
	if err != nil || res.Version != 8 {
		t.Fatalf("dry run: %v %+v", err, res)
	}
	for _, want := range []string{"fence 1 range(s) on source shard1", "publish topology v8", "unfence the ranges on target shard5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestStaleAttemptChangesNothing: attempt 1 fences the source and stalls
// (its worker cut off); Temporal retries the cutover as attempt 2, which
// claims the move, undoes attempt 1's fence (the topology is unpublished)
// and cuts over. Attempt 1 waking up at any point after the claim can
// neither journal, nor publish, nor lift attempt 2's fences.
func TestStaleAttemptChangesNothing(t *testing.T) {
	ctx := context.Background()
	e := newCutoverEnv(t)
	moving := keyIn(t, e.src, true)
	j1, err := e.journal.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a1 := e.actionsOf(j1)
	if err := j1.Record(ctx, StepFenceSource, ""); err != nil {
		t.Fatal(err)
	}
	if err := a1.FenceSource(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.src.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving); !router.IsFenceError(err) {
		t.Fatalf("attempt 1 fenced the source, yet a write passed: %v", err)
	}

	j2, err := e.journal.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2 := e.actionsOf(j2)
	if done, err := Resume(ctx, a2, j2); err != nil || done {
		t.Fatalf("attempt 2 settling attempt 1: done %v, %v", done, err)
	}
	if _, err := e.src.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'y') ON CONFLICT (id) DO UPDATE SET v = 'y'", moving); err != nil {
		t.Fatalf("the source after attempt 2 undid attempt 1's fence: %v", err)
	}
	// Attempt 1 wakes up before attempt 2 runs: it can neither journal nor
	// publish.
	if err := j1.Record(ctx, StepPublish, "m"); !errors.Is(err, ErrStale) {
		t.Fatalf("a journal record by the stale attempt: %v, want ErrStale", err)
	}
	if _, err := a1.Publish(ctx); !errors.Is(err, ErrStale) {
		t.Fatalf("a publish by the stale attempt: %v, want ErrStale", err)
	}
	if v := e.version(t); v != 2 {
		t.Fatalf("topology v%d after the stale publish, want v2", v)
	}
	// Attempt 2 cuts over; attempt 1's unfence changes nothing after that.
	res, err := Run(ctx, a2, j2, Options{Budget: 2 * time.Second})
	if err != nil || res.Version != 3 {
		t.Fatalf("attempt 2: %+v %v", res, err)
	}
	if err := a1.UnfenceSource(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.src.Pool.Exec(ctx, "UPDATE users SET v = 'stale' WHERE id = $1", moving); !router.IsFenceError(err) {
		t.Fatalf("the old owner after a stale attempt's unfence: %v; want the fence error", err)
	}
	if _, err := e.dst.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'new owner') ON CONFLICT (id) DO UPDATE SET v = 'new owner'", moving); err != nil {
		t.Fatalf("the new owner: %v", err)
	}
}

// unreachableSource is a source that cannot be reached for a while (crashed,
// or cut off by the network) as far as unfencing it goes.
type unreachableSource struct {
	*PG
	until time.Time
	tries int
}

func (u *unreachableSource) UnfenceSource(ctx context.Context) error {
	u.tries++
	if time.Now().Before(u.until) {
		return errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	}
	return u.PG.UnfenceSource(ctx)
}

// A source that crashes inside the write pause ends the CDC stream (the
// drain fails) and cannot be unfenced at once: the abort keeps trying, and
// unfences it within a moment of its coming back instead of leaving it to the
// activity's retries. The journal then reports the whole pause.
func TestAbortUnfencesSourceAsSoonAsItIsBack(t *testing.T) {
	ctx := context.Background()
	e := newCutoverEnv(t)
	moving := keyIn(t, e.src, true)
	p := e.actions()
	p.DrainFunc = func(context.Context, string, time.Duration) error {
		return errors.New("the CDC stream ended: unexpected EOF")
	}
	const down = 1500 * time.Millisecond
	u := &unreachableSource{PG: p, until: time.Now().Add(down)}
	start := time.Now()
	_, err := Run(ctx, u, e.journal, Options{Budget: 2 * time.Second})
	took := time.Since(start)
	if !errors.Is(err, ErrAborted) {
		t.Fatalf("cutover whose drain failed: %v", err)
	}
	if u.tries < 2 || took < down || took > down+time.Second {
		t.Fatalf("abort tried to unfence %d times and returned after %s; want it to keep trying and return within 1s of the source's return (%s)", u.tries, took, down)
	}
	if _, err := e.src.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving); err != nil {
		t.Fatalf("source still fenced after abort: %v", err)
	}
	ps, err := e.journal.Pauses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Fenced != 1 || ps.Open || ps.Total < down || ps.Total > took+time.Second || ps.Longest != ps.Total {
		t.Fatalf("pauses from the journal %+v; the attempt took %s", ps, took)
	}
	// A second, successful attempt adds its own pause.
	if _, err := Run(ctx, e.actions(), e.journal, Options{Budget: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	ps2, err := e.journal.Pauses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ps2.Fenced != 2 || ps2.Total <= ps.Total || ps2.Longest != ps.Longest {
		t.Fatalf("pauses after a second attempt %+v (after the first %+v)", ps2, ps)
	}
}

// OpenPause: what the worker's gauge reshard_cutover_open_write_pause_seconds
// reports, from the journal.
func TestOpenPause(t *testing.T) {
	ctx := context.Background()
	e := newCutoverEnv(t)
	if d, err := OpenPause(ctx, e.ctl.Pool); err != nil || d != 0 {
		t.Fatalf("no cutover yet: %s %v", d, err)
	}
	if err := e.journal.Record(ctx, StepFenceSource, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if d, err := OpenPause(ctx, e.ctl.Pool); err != nil || d < 100*time.Millisecond || d > 5*time.Second {
		t.Fatalf("fenced 100ms ago: %s %v", d, err)
	}
	if err := e.journal.Record(ctx, StepAbort, "test"); err != nil {
		t.Fatal(err)
	}
	if d, err := OpenPause(ctx, e.ctl.Pool); err != nil || d != 0 {
		t.Fatalf("after the abort: %s %v", d, err)
	}
}

// opensAt records the connections each pool had opened when the gates
// (the last step before the fence) returned.
type opensAt struct {
	*PG
	pools []*pgxpool.Pool
	at    []int64
}

func (o *opensAt) Gates(ctx context.Context) error {
	err := o.PG.Gates(ctx)
	for _, p := range o.pools {
		o.at = append(o.at, p.Stat().NewConnsCount())
	}
	return err
}

// The write pause opens no connection: the gates open, on pools that have
// none yet, every connection the pause uses at once (the unfence step's
// reconcile reads the control database twice side by side while the hold
// is released), so no step inside the pause waits for a connect and its
// authentication. Without the warm-up the fence step's reconcile connects
// to the source inside the pause.
func TestWritePauseOpensNoConnection(t *testing.T) {
	ctx := context.Background()
	e := newCutoverEnv(t)
	fresh := func(db *pgtest.DB) *pgxpool.Pool {
		cfg, err := pgsession.ParsePoolConfig(db.DSN)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 8
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	src, dst, ctl := fresh(e.src), fresh(e.dst), fresh(e.ctl)
	fences := fence.Control{Pool: ctl, Store: topology.NewStore(ctl)}
	j, err := PGJournal{Pool: ctl, Move: "m1"}.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := Move{ID: "m1", From: "src", To: "dst", Source: src, Target: dst, Set: e.set, Ranges: e.ranges}
	p := NewPG(m, nil, fences, topology.CutOver(e.target, e.ranges, "src", "dst", "cutover of m1"), j)
	p.DrainFunc = func(context.Context, string, time.Duration) error { return nil }
	a := &opensAt{PG: p, pools: []*pgxpool.Pool{src, dst, ctl}}
	if _, err := Run(ctx, a, j, Options{Budget: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"source", "target", "control database"} {
		if after := a.pools[i].Stat().NewConnsCount(); after != a.at[i] {
			t.Errorf("the %s's pool opened %d connection(s) inside the write pause (%d before the fence, %d after the unfence)", name, after-a.at[i], a.at[i], after)
		}
	}
}
