package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// runFor executes the CLI in-process with a deadline.
func runFor(t *testing.T, d time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		out.WriteString("reshard: " + err.Error() + "\n")
		return out.String(), exitCode(err)
	}
	return out.String(), 0
}

// The operator actions against the real worker: Updates accepted, rejected by
// the validators (exit 3), deduplicated by --request-id; status from the
// state query; a rollback watched to its end.
func TestActionsAgainstWorker(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 3000) // the first migration registers the keyspace: no row may sit on a non-owner
	opts := &globalOptions{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg, err := (&configFlags{path: c.config}).load(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The PLAN's capacity probe watches each shard's WAL for 200 ms, as
	// startWorker's do, not the default 2 s: the shards are idle.
	go func() {
		done <- runWorker(ctx, opts, cfg, workerFlags{listen: "127.0.0.1:0", walWindow: 200 * time.Millisecond})
	}()
	t.Cleanup(func() {
		_ = c.tc.TerminateWorkflow(context.Background(), "reshard-act-one", "", "test ends")
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})

	// 50 rows/s keeps each move copying its ~1500 rows for half a minute.
	out, code := c.run(t, "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--id", "act-one", "--rows-per-sec", "50")
	if code != 0 {
		t.Fatalf("add-node: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "approve", "act-one")
	if code != 3 || !strings.Contains(out, "rejected: this migration was not started with require-approval") {
		t.Errorf("approve without --require-approval: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "pause", "act-one", "--request-id", "p1")
	if code != 0 || !strings.HasPrefix(out, "pause act-one: paused") {
		t.Fatalf("pause: exit %d\n%s", code, out)
	}
	// The same request again is the same Update: answered, not re-validated.
	again, code := c.run(t, "pause", "act-one", "--request-id", "p1")
	if code != 0 || again != out {
		t.Errorf("pause retried with the same --request-id: exit %d\n%s\nwant exit 0 and\n%s", code, again, out)
	}
	out, code = c.run(t, "pause", "act-one")
	if code != 3 || !strings.Contains(out, "rejected: already paused") {
		t.Errorf("a second pause: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "throttle", "act-one", "--rows-per-sec", "40", "--request-id", "t1", "--json")
	var thr struct {
		Verb, ID, Result string
		UpdateID         string   `json:"update_id"`
		NextSteps        []string `json:"next_steps"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &thr) != nil || thr.Verb != "throttle" || thr.ID != "act-one" ||
		thr.UpdateID != control.UpdateID("throttle", "act-one", "t1") || !strings.HasPrefix(thr.Result, "throttle 40 rows/s") ||
		strings.Join(thr.NextSteps, ",") != "reshard status act-one" {
		t.Errorf("throttle: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "complete", "act-one")
	if code != 3 || !strings.Contains(out, "rejected: complete ends GRACE early") {
		t.Errorf("complete outside GRACE: exit %d\n%s", code, out)
	}

	// The state query, once both moves are copying (paused). Waiting for
	// that also keeps the rollback below from racing the start of the Move
	// children: a rollback accepted before a child runs is not relayed to it
	// (reported to the workflows' owner).
	var st statusJSON
	deadline := time.Now().Add(90 * time.Second)
	copying := func() bool {
		for _, m := range st.State.Moves {
			if m.Phase != workflows.PhaseSnapshotCopy || !m.Paused {
				return false
			}
		}
		return len(st.State.Moves) == 2
	}
	for {
		out, code = c.run(t, "status", "act-one", "--json")
		st = statusJSON{}
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && copying() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: exit %d, the moves are not both copying (paused) after 90s\n%s", code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if st.ID != "act-one" || st.State.Request.Throttle.RowsPerSec != 50 || st.State.Moves[0].Spec.Target != "shard3" || st.State.FromVersion != 1 ||
		strings.Join(st.NextSteps, ",") != "reshard resume act-one" {
		t.Errorf("state: %+v", st)
	}
	out, code = c.run(t, "status")
	if code != 0 || !strings.Contains(out, "migration act-one") || !strings.Contains(out, "shard1 → shard3") || !strings.Contains(out, "SNAPSHOT_COPY (paused)") ||
		!strings.Contains(out, "\nnext: reshard resume act-one\n") {
		t.Errorf("status of the newest running migration: exit %d\n%s", code, out)
	}

	out, code = c.run(t, "resume", "act-one")
	if code != 0 || !strings.HasPrefix(out, "resume act-one: resumed") {
		t.Errorf("resume: exit %d\n%s", code, out)
	}
	c.pauseCutsTheSlices(t, st.State.Moves)
	out, code = c.run(t, "rollback", "act-one")
	if code != 0 || !strings.HasPrefix(out, "rollback act-one: rolling back") {
		t.Fatalf("rollback: exit %d\n%s", code, out)
	}
	out, code = runFor(t, 3*time.Minute, "status", "--config", c.config, "act-one", "--watch", "--interval", "500ms")
	// A migration that ended rolled back is not success: exit 1.
	if code != 1 || !strings.Contains(out, "migration act-one ended: "+string(workflows.PhaseRolledBack)) || !strings.Contains(out, "was rolled back") {
		t.Errorf("status --watch through the rollback: exit %d\n%s", code, out)
	}
	// ROLLING_BACK may pass between two polls of the watch; the moves'
	// timings keep it.
	out, code = c.run(t, "status", "act-one", "--json")
	st = statusJSON{}
	if code != 1 || json.NewDecoder(strings.NewReader(out)).Decode(&st) != nil || len(st.State.Moves) != 2 {
		t.Fatalf("status after the rollback: exit %d (want 1: rolled back)\n%s", code, out)
	}
	if strings.Join(st.NextSteps, ",") != "reshard topology check" {
		t.Errorf("next steps after the rollback: %q", st.NextSteps)
	}
	for _, m := range st.State.Moves {
		var phases []string
		for _, tm := range m.Timings {
			phases = append(phases, string(tm.Phase))
		}
		if got := strings.Join(phases, ","); m.Phase != workflows.PhaseRolledBack || !strings.HasSuffix(got, "SNAPSHOT_COPY,ROLLING_BACK") {
			t.Errorf("move %s ended %s through %s", m.Spec.ID, m.Phase, got)
		}
	}
	if n := c.slots(t); n != 0 {
		t.Errorf("%d replication slots left after the rollback", n)
	}
}

// pauseCutsTheSlices pauses the migration act-one while both its moves run
// a copy slice (50 rows/s: each would run its 20 s): the pause takes effect
// at once, the slices cancelled within 2 s, and the rows status reports are
// the rows the target holds (the cut slices' checkpoints are whole). On
// main the slices ran to their end (TestActionsAgainstWorker then waited
// for them again at the rollback).
func (c *testCluster) pauseCutsTheSlices(t *testing.T, moves []workflows.MoveState) {
	t.Helper()
	slicing := func() int {
		n := 0
		for _, m := range moves {
			d, err := c.tc.DescribeWorkflowExecution(context.Background(), workflows.MoveWorkflowID(workflows.MigrationWorkflowID("act-one"), m.Spec.ID), "")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range d.GetPendingActivities() {
				if a.GetActivityType().GetName() == workflows.ActivityCopySlice {
					n++
				}
			}
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for slicing() < len(moves) {
		if time.Now().After(deadline) {
			t.Fatalf("30s after resume, %d of %d moves run a copy slice", slicing(), len(moves))
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // a chunk or two into the slices
	asked := time.Now()
	if out, code := c.run(t, "pause", "act-one", "--request-id", "p2"); code != 0 || !strings.HasPrefix(out, "pause act-one: paused") {
		t.Fatalf("pause while the slices run: exit %d\n%s", code, out)
	}
	for n := slicing(); n > 0; n = slicing() {
		if time.Since(asked) > 2*time.Second {
			t.Fatalf("%s after the pause, %d moves still run a copy slice: the pause waits for the slice's end", time.Since(asked).Round(time.Millisecond), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the pause took effect in %s", time.Since(asked).Round(time.Millisecond))
	target := c.shards["shard3"]
	onTarget := target.QueryInt64(t, `SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM orders)`)
	var reported int64
	for {
		out, code := c.run(t, "status", "act-one", "--json")
		var st statusJSON
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("status while paused: exit %d\n%s", code, out)
		}
		reported = 0
		for _, m := range st.State.Moves {
			reported += m.RowsCopied
		}
		if reported == onTarget || time.Since(asked) > 5*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if reported != onTarget || onTarget == 0 {
		t.Errorf("while paused, status reports %d rows copied, the target holds %d", reported, onTarget)
	}
	if again := target.QueryInt64(t, `SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM orders)`); again != onTarget {
		t.Errorf("while paused, the target's rows went from %d to %d", onTarget, again)
	}
}
