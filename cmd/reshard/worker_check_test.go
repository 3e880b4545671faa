package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.yaml.in/yaml/v3"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// temporalOnlyConfig writes a reshard.yaml whose databases are never
// reached (the operator actions only speak to Temporal) and dials Temporal.
func temporalOnlyConfig(t *testing.T) (string, client.Client) {
	t.Helper()
	tt := pgtest.Temporal(t)
	wc := devenv.WorkerConfig{
		Control:  "postgres://reshard@127.0.0.1:1/control?sslmode=disable",
		Shards:   map[string]string{"shard1": "postgres://reshard@127.0.0.1:1/shard1?sslmode=disable"},
		Temporal: devenv.TemporalConfig{Address: tt.Address(), Namespace: devenv.Namespace},
	}
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "reshard.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tc, err := client.Dial(client.Options{HostPort: tt.Address(), Namespace: devenv.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return path, tc
}

// updateAdmitted says whether Temporal holds the Update (admitted, waiting
// for a worker) or has never heard of it.
func updateAdmitted(t *testing.T, tc client.Client, wfID, uid string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := tc.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{WorkflowID: wfID, UpdateID: uid}).Get(ctx, nil)
	var (
		nf      *serviceerror.NotFound
		waiting *client.WorkflowUpdateServiceTimeoutOrCanceledError
	)
	switch {
	case errors.As(err, &nf):
		return false
	case err == nil, ctx.Err() != nil, errors.As(err, &waiting):
		return true // applied, or waiting for a worker
	default:
		t.Fatalf("poll update %s: %v", uid, err)
		return false
	}
}

// With no worker polling, an operator action is refused and nothing is sent
// (today's main sent it, and Temporal applied it whenever a worker started);
// with a worker polling that does not answer, the action says it is pending
// (exit 4) and Temporal holds it.
func TestActionsRefusedWithoutWorker(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	config, tc := temporalOnlyConfig(t)
	ctx := context.Background()
	const id = "nowk"
	wfID := workflows.MigrationWorkflowID(id)
	if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wfID, TaskQueue: workflows.TaskQueue},
		workflows.MigrationWorkflow, workflows.MigrationRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), wfID, "", "test ends") })

	verbs := [][]string{{"pause"}, {"resume"}, {"approve"}, {"rollback"}, {"complete"}, {"reverify"}, {"throttle", "--rows-per-sec", "10"}}
	for _, v := range verbs {
		args := append([]string{v[0], id, "--config", config, "--request-id", "r1", "--timeout", "3s"}, v[1:]...)
		out, code := run(t, args...)
		if code != 1 || !strings.Contains(out, "no reshard worker polls task queue \"reshard\"") ||
			!strings.Contains(out, "start one (reshard worker --config "+config+")") || !strings.Contains(out, "nothing was sent") {
			t.Errorf("%s with no worker: exit %d\n%s", v[0], code, out)
		}
		if updateAdmitted(t, tc, wfID, control.UpdateID(v[0], id, "r1")) {
			t.Errorf("%s with no worker: the update reached Temporal; it would be applied whenever a worker starts", v[0])
		}
	}
	// An unknown migration is still bad input, not "no worker".
	if out, code := run(t, "pause", "nosuch", "--config", config, "--timeout", "3s"); code != 2 || !strings.Contains(out, "no migration nosuch") {
		t.Errorf("pause of an unknown migration with no worker: exit %d\n%s", code, out)
	}

	// A poller that takes workflow tasks and never answers: a worker that
	// is there but slow (or stuck).
	silentPoller(t, tc)
	out, code := run(t, "pause", id, "--config", config, "--request-id", "r2", "--timeout", "2s")
	if code != 4 || !strings.Contains(out, "pause nowk: pending, not applied yet") || !strings.Contains(out, "applied (or rejected by the workflow's checks) when a worker runs the workflow") ||
		!strings.Contains(out, "--request-id r2") {
		t.Errorf("pause with a silent worker: exit %d\n%s", code, out)
	}
	if !updateAdmitted(t, tc, wfID, control.UpdateID("pause", id, "r2")) {
		t.Errorf("pause reported pending, but Temporal does not hold the update")
	}
}

// add-node with no worker polling starts the migration (it begins when a
// worker runs) and says so on stderr; today's main said nothing.
func TestStartWarnsWithoutWorker(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 300)
	out, code := c.run(t, "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--id", "nowk-add")
	t.Cleanup(func() {
		_ = c.tc.TerminateWorkflow(context.Background(), workflows.MigrationWorkflowID("nowk-add"), "", "test ends")
	})
	if code != 0 || !strings.Contains(out, "started migration nowk-add") ||
		!strings.Contains(out, "warning: no reshard worker polls task queue \"reshard\"") || !strings.Contains(out, "waits and begins only when one runs") {
		t.Errorf("add-node with no worker: exit %d\n%s", code, out)
	}
}

// silentPoller polls the task queue for workflow tasks and never answers
// them, as a worker that is there but stuck would, until the returned stop
// (also called at cleanup). It returns once DescribeTaskQueue lists it.
// stop fails the tasks it holds, as a stuck worker that comes back to
// itself would: the workflow's next task goes to a real worker at once, not
// after the held task's timeout (10 s; TestPendingRequestInStatus waited
// for it).
func silentPoller(t *testing.T, tc client.Client) (stop func()) {
	t.Helper()
	ctx := context.Background()
	pctx, stopPoller := context.WithCancel(ctx)
	polled := make(chan struct{})
	var held [][]byte // task tokens; read after polled is closed
	go func() {
		defer close(polled)
		for pctx.Err() == nil {
			lctx, cancel := context.WithTimeout(pctx, 70*time.Second) // a long poll, as the SDK's
			task, err := tc.WorkflowService().PollWorkflowTaskQueue(lctx, &workflowservice.PollWorkflowTaskQueueRequest{
				Namespace: devenv.Namespace, Identity: "test-silent-poller",
				TaskQueue: &taskqueuepb.TaskQueue{Name: workflows.TaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
			})
			cancel()
			if err == nil && len(task.GetTaskToken()) > 0 {
				held = append(held, task.GetTaskToken())
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopPoller()
			<-polled
			for _, token := range held {
				if _, err := tc.WorkflowService().RespondWorkflowTaskFailed(ctx, &workflowservice.RespondWorkflowTaskFailedRequest{
					Namespace: devenv.Namespace, Identity: "test-silent-poller", TaskToken: token,
					Cause: enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE,
				}); err != nil {
					t.Logf("the silent poller's held task: %v (the workflow's next task waits for its timeout)", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := control.WorkerPolls(ctx, tc)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatal("the test poller is not listed by DescribeTaskQueue after 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A request left pending (a worker polls but does not answer) is listed by
// status, even while no worker answers its query, until a worker applies
// it; main listed nothing.
func TestPendingRequestInStatus(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 300)
	const id = "pend"
	if out, code := c.run(t, "add-node", "shard3", "--id", id, "--rows-per-sec", "50", "--table", "users:id", "--table", "orders:user_id"); code != 0 {
		t.Fatalf("add-node: exit %d\n%s", code, out)
	}
	t.Cleanup(func() {
		_ = c.tc.TerminateWorkflow(context.Background(), workflows.MigrationWorkflowID(id), "", "test ends")
	})
	stopReport := reportStuckWorker(t, c.control.DSN)
	stop := silentPoller(t, c.tc)
	out, code := c.run(t, "pause", id, "--request-id", "p1", "--timeout", "2s")
	if code != 4 || !strings.Contains(out, "reshard status "+id+" lists it while it waits") {
		t.Fatalf("pause with a silent worker: exit %d\n%s", code, out)
	}
	out, code = c.run(t, "status", id, "--timeout", "2s")
	if code != 1 || !strings.Contains(out, "pending request: pause sent") || !strings.Contains(out, "--request-id p1") ||
		!strings.Contains(out, "no worker answered the state query") {
		t.Fatalf("status with the pause pending and no worker answering: exit %d\n%s", code, out)
	}
	t.Logf("status while pending:\n%s", out)

	// A worker runs the workflow: the pause is applied, status lists it no
	// more and shows the migration paused.
	stop()
	stopReport()
	wc, err := devenv.ReadWorkerConfig(c.config)
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, wc)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, code = c.run(t, "status", id, "--timeout", "5s")
		if code == 0 && !strings.Contains(out, "pending request") && strings.Contains(out, "paused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after a worker started, status still shows (exit %d):\n%s", code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("status once applied:\n%s", out)
}

// reportStuckWorker keeps a worker's row in the control database's
// reshard.workers fresh, as a worker that runs but does not answer (stuck)
// does, until the returned stop (also called at cleanup).
func reportStuckWorker(t *testing.T, controlDSN string) (stop func()) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), controlDSN)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	report := func() error {
		_, err := pool.Exec(ctx, `INSERT INTO reshard.workers (identity, task_queue, shards) VALUES ('test-stuck-worker', $1, '{shard1,shard2,shard3}')
ON CONFLICT (identity) DO UPDATE SET seen_at = now()`, workflows.TaskQueue)
		return err
	}
	if err := report(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				_ = report()
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_, _ = pool.Exec(context.Background(), `DELETE FROM reshard.workers WHERE identity = 'test-stuck-worker'`)
			pool.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// A worker that died a moment ago is still listed by Temporal as polling
// (for up to two minutes), but it no longer reports itself in the control
// database: status says so at once instead of waiting its whole --timeout
// for an answer, and add-node warns that no worker runs it. On main, status
// waited 10s and add-node started silently.
func TestDeadWorkerIsNoWorker(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	c := newTestCluster(t, true)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	placeByOwner(t, c, 300)
	// The dead worker's last report, older than topology.WorkerFresh, and
	// its poller still listed by Temporal.
	c.control.Exec(t, `INSERT INTO reshard.workers (identity, task_queue, shards, seen_at) VALUES ('dead-worker', 'reshard', '{shard1,shard2,shard3}', now() - interval '20 seconds')`)
	silentPoller(t, c.tc)

	const id = "deadwk"
	out, code := c.run(t, "add-node", "shard3", "--id", id, "--table", "users:id", "--table", "orders:user_id")
	t.Cleanup(func() {
		_ = c.tc.TerminateWorkflow(context.Background(), workflows.MigrationWorkflowID(id), "", "test ends")
	})
	if code != 0 || !strings.Contains(out, "warning: no reshard worker polls task queue") {
		t.Errorf("add-node a moment after the worker died: exit %d\n%s", code, out)
	}
	start := time.Now()
	out, code = c.run(t, "status", id, "--timeout", "10s")
	took := time.Since(start)
	if code != 1 || !strings.Contains(out, "no worker can answer the state query") || !strings.Contains(out, "start one (reshard worker --config") {
		t.Errorf("status a moment after the worker died: exit %d\n%s", code, out)
	}
	if took > 5*time.Second {
		t.Errorf("status took %s to say no worker runs (its --timeout is 10s): it should not wait for an answer", took)
	}
	t.Logf("status answered in %s:\n%s", took.Round(time.Millisecond), out)
	if out, code := run(t, "pause", id, "--config", c.config, "--timeout", "3s"); code != 1 || !strings.Contains(out, "nothing was sent") {
		t.Errorf("pause a moment after the worker died: exit %d\n%s", code, out)
	}
}
