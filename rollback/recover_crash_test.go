package rollback_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/topology"
)

// crashing is the cutover's real actions in a process that dies at step
// at: that step fails, and the process unfences nothing after it (a dead
// process does not run the cutover's abort).
type crashing struct {
	*cutover.PG
	at   cutover.Step
	dead bool
}

var errDied = errors.New("the worker died")

func (c *crashing) WaitInFlight(ctx context.Context, budget time.Duration) error {
	if c.at == cutover.StepWaitInFlight {
		c.dead = true
		return errDied
	}
	return c.PG.WaitInFlight(ctx, budget)
}

func (c *crashing) UnfenceTarget(ctx context.Context) error {
	if c.at == cutover.StepUnfenceTarget {
		c.dead = true
		return errDied
	}
	return c.PG.UnfenceTarget(ctx)
}

func (c *crashing) UnfenceSource(ctx context.Context) error {
	if c.dead {
		return errDied
	}
	return c.PG.UnfenceSource(ctx)
}

// crashCutover runs the move to a cutover whose worker dies at step at,
// then stops the forward stream: what a workflow terminated at that moment
// leaves.
func crashCutover(t *testing.T, e *movetest.Env, at cutover.Step) {
	t.Helper()
	ctx := movetest.Ctx(t)
	e.BeginMigration(t, recoverMigration)
	e.Copy(t)
	e.StartForward(t)
	movetest.Drain(t, e.DBs["a"], e.Fwd)
	var err error
	if _, e.RevL0, err = join.Reverse(ctx, e.Move, e.DBs["b"].ReplicationDSN()); err != nil {
		t.Fatal(err)
	}
	was := cutover.UnfenceFor
	cutover.UnfenceFor = 200 * time.Millisecond // the dead process's abort gives up at once
	_, err = cutover.Run(ctx, &crashing{PG: e.CutoverActions(t), at: at}, e.Journal(), cutover.Options{Budget: 2 * time.Second})
	cutover.UnfenceFor = was
	if !errors.Is(err, errDied) {
		t.Fatalf("cutover crashed at %s: %v", at, err)
	}
	e.StopForward(t)
}

// writeTo upserts a moving key on shard (the fence sees the new row
// whether or not the shard holds it); it returns the fence error, if any.
func writeTo(t *testing.T, e *movetest.Env, shard string) error {
	t.Helper()
	_, err := e.Pools[shard].Exec(movetest.Ctx(t), `INSERT INTO kv (k, v) VALUES ($1, 'after') ON CONFLICT (k) DO UPDATE SET v = excluded.v`, e.MovingKeys[0])
	if err != nil && !router.IsFenceError(err) {
		t.Fatalf("write on %s: %v", shard, err)
	}
	return err
}

// TestRecoverCutoverCrashedWhileFenced: the worker died with the source
// fenced, before the publish. The source refuses writes on the moving
// ranges that it still owns; Recover settles the cutover from its journal
// (unfences the source) and rolls the move back.
func TestRecoverCutoverCrashedWhileFenced(t *testing.T) {
	e := movetest.New(t, topology.MoveID(recoverMigration, 1), 300)
	crashCutover(t, e, cutover.StepWaitInFlight)
	if err := writeTo(t, e, "a"); err == nil {
		t.Fatal("the crashed cutover left the source unfenced: the test crashed nothing")
	}
	rec := recoverTwice(t, e)
	if rec.Moves[0].Action != "rolled back" {
		t.Fatalf("recovery %+v, want the move rolled back", rec)
	}
	if err := writeTo(t, e, "a"); err != nil {
		t.Fatalf("after recover, the owner refuses a write of its key: %v", err)
	}
	cur, _ := e.Store.Current(movetest.Ctx(t))
	if !topology.Owns(cur.Ring, "a", e.Move.Ranges) || len(cur.Migrating()) != 0 {
		t.Fatalf("topology v%d: the range not stable on a", cur.Version)
	}
	leftovers(t, e)
	e.CheckFences(t, false, map[string][]ring.Range{"a": cur.Ring.Ranges("b"), "b": cur.Ring.Ranges("a")})
	if n := e.Ctl.QueryInt64(t, `SELECT count(*) FROM reshard.fence_hold`); n != 0 {
		t.Fatalf("%d fence holds left", n)
	}
}

// TestRecoverCutoverCrashedAfterPublish: the worker died after the publish,
// before unfencing the target. The new owner refuses writes of the keys it
// owns; Recover completes the move (unfenced, the old owner's copy gone).
func TestRecoverCutoverCrashedAfterPublish(t *testing.T) {
	e := movetest.New(t, topology.MoveID(recoverMigration, 1), 300)
	crashCutover(t, e, cutover.StepUnfenceTarget)
	if err := writeTo(t, e, "b"); err == nil {
		t.Fatal("the crashed cutover left the target unfenced: the test crashed nothing")
	}
	rec := recoverTwice(t, e)
	if rec.Moves[0].Action != "completed" {
		t.Fatalf("recovery %+v, want the move completed", rec)
	}
	if err := writeTo(t, e, "b"); err != nil {
		t.Fatalf("after recover, the new owner refuses a write of its key: %v", err)
	}
	if err := writeTo(t, e, "a"); err == nil {
		t.Fatal("after recover, the old owner accepts a write of a key it gave away")
	}
	leftovers(t, e)
	e.CheckFences(t, false, map[string][]ring.Range{"a": e.New.Ranges("b"), "b": e.New.Ranges("a")})
	if n := e.CountIn(t, "a", "kv", e.Move.Ranges); n != 0 {
		t.Fatalf("%d rows left on the old owner", n)
	}
	if n := e.Ctl.QueryInt64(t, `SELECT count(*) FROM reshard.fence_hold`); n != 0 {
		t.Fatalf("%d fence holds left", n)
	}
}
