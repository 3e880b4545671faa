package cutover_test

import (
	"context"
	"strings"
	"testing"

	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/movetest"
)

// JOINING (package join) is tested here, beside the cutover's scenarios on
// the same harness: a test package of its own would start two more servers
// in make test (44 s for this test alone at load 35, most of it the
// servers' start).
//
// JOINING leaves the target fenced on the moving ranges and the slot on the
// source; a second run (a retried activity) keeps the slot and returns the
// same consistent point, so the copy and the stream start where they would
// have; a run without a replication connection is refused and changes
// nothing.
func TestJoinFencesTheTargetAndKeepsTheSlot(t *testing.T) {
	e := movetest.New(t, "join", 200)
	ctx := movetest.Ctx(t)
	if _, err := join.Run(ctx, e.Move, join.Options{Fences: e.Fences}); err == nil || !strings.Contains(err.Error(), "replication connection to a") {
		t.Fatalf("no replication connection: %v, want a refusal naming the source", err)
	}
	if n := e.DBs["a"].QueryInt64(t, `SELECT count(*) FROM pg_replication_slots`); n != 0 {
		t.Fatalf("the refused run left %d slots", n)
	}
	if _, err := join.ReplicationDSN(e.DBs["a"].DSN, "a")(ctx); err == nil || !strings.Contains(err.Error(), "of a needs replication=database") || strings.Contains(err.Error(), e.DBs["a"].DSN) {
		t.Fatalf("a plain DSN for replication: %v, want a refusal naming the shard, not the DSN", err)
	}
	e.Begin(t) // join.Run
	if e.L0 == 0 {
		t.Fatal("JOINING returned no consistent point")
	}
	o := join.Options{Fences: e.Fences, SourceSet: e.SrcSet, Replication: join.ReplicationDSN(e.DBs["a"].ReplicationDSN(), "a")}
	again, err := join.Run(ctx, e.Move, o)
	if err != nil {
		t.Fatal(err)
	}
	if again.L0 != e.L0 || again.Source.SystemID == "" || again.Source.Timeline != 1 {
		t.Fatalf("second run: L0 %s, source %+v; want L0 %s and the server's identity", again.L0, again.Source, e.L0)
	}
	if n := e.DBs["a"].QueryInt64(t, `SELECT count(*) FROM pg_replication_slots`); n != 1 {
		t.Fatalf("%d slots on the source after two runs, want 1", n)
	}
	// Only the applier writes the moving ranges on the target.
	_, err = e.DBs["b"].Pool.Exec(context.Background(), `INSERT INTO kv (k, v) VALUES ($1, 'app')`, e.MovingKeys[0])
	if !router.IsFenceError(err) {
		t.Fatalf("an application write to a moving key on the target: %v, want the fence error", err)
	}
}
