package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestUpdateID(t *testing.T) {
	if NewRequestID() == NewRequestID() {
		t.Error("fresh request ids repeat")
	}
	a := UpdateID("pause", "m1", "r1")
	if a != UpdateID("pause", "m1", "r1") {
		t.Error("update id is not deterministic")
	}
	for _, b := range []string{UpdateID("resume", "m1", "r1"), UpdateID("pause", "m2", "r1"), UpdateID("pause", "m1", "r2")} {
		if a == b {
			t.Errorf("update ids collide: %s", a)
		}
	}
}

// The workflow's refusal (validator or handler) is a *Rejected with its
// reason; a transport error is not.
func TestRejection(t *testing.T) {
	reason := workflows.UpdateApprove + " is accepted when a move has passed VERIFY"
	var rej *Rejected
	if err := asRejection(temporal.NewApplicationError(reason, "")); !errors.As(err, &rej) || rej.Reason != reason {
		t.Errorf("application error: %v", err)
	}
	if err := asRejection(fmt.Errorf("update: %w", temporal.NewCanceledError())); !errors.As(err, &rej) || rej.Reason != "the workflow cancelled the update" {
		t.Errorf("cancelled: %v", err)
	}
	if err := asRejection(serviceerror.NewUnavailable("down")); errors.As(err, &rej) {
		t.Errorf("a transport error taken for a rejection: %v", err)
	}
	if got := (&Rejected{"already paused"}).Error(); got != "rejected: already paused" {
		t.Errorf("message %q", got)
	}
}

// A call the frontend ends first is "no answer", however the SDK hands the
// error over.
// approve's refusals name approve, not the Update it sends.
func TestRejectionNamesTheVerb(t *testing.T) {
	// The reason as the Migration workflow's validator words it.
	rej := &Rejected{workflows.UpdateApprove + " is accepted when a move has passed VERIFY or waits in CUTOVER; move m1 is in SNAPSHOT_COPY"}
	got := rej.as("approve", workflows.UpdateApprove).Error()
	if strings.Contains(got, "approve-cutover") || !strings.HasPrefix(got, "rejected: approve is accepted when") {
		t.Errorf("approve's refusal: %q", got)
	}
}

func TestAbandoned(t *testing.T) {
	for _, err := range []error{
		serviceerror.NewCanceled("stream terminated by RST_STREAM with error code: CANCEL"),
		serviceerror.NewDeadlineExceeded("context deadline exceeded"),
		grpcstatus.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL"),
		fmt.Errorf("query: %w", serviceerror.NewCanceled("x")),
	} {
		if !Abandoned(err) {
			t.Errorf("Abandoned(%T %v) = false", err, err)
		}
	}
	if Abandoned(errors.New("workflow not found")) || Abandoned(serviceerror.NewNotFound("x")) {
		t.Error("a refusal taken for an abandoned call")
	}
}

func TestIDsAndStatus(t *testing.T) {
	if IDOf("reshard-add-abc") != "add-abc" || IDOf("add-abc") != "add-abc" {
		t.Error("IDOf does not take both forms")
	}
	if got := StatusText(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED); got != "terminated" {
		t.Errorf("StatusText = %q", got)
	}
	if PayloadString(nil) != "" {
		t.Error("no payload is not empty")
	}
}

// Against the Temporal dev server, with no worker: a migration starts (and
// waits), is listed with its phase and summary, runs, cannot start twice;
// an Update sent to it is held unanswered; once terminated it runs no more
// and says how it ended.
func TestControlPlane(t *testing.T) {
	tt := pgtest.Temporal(t)
	tc, err := client.Dial(client.Options{HostPort: tt.Address(), Namespace: devenv.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ctx := context.Background()
	id := fmt.Sprintf("ctl-%d", time.Now().UnixNano()%1_000_000)
	req := workflows.MigrationRequest{ID: id, Kind: workflows.KindAddNode, Shard: "shard9"}
	if _, err := Start(ctx, tc, req, "add-node shard9: 1 move(s)", "### details"); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(ctx, tc, req, "again", ""); !errors.Is(err, ErrTaken) {
		t.Errorf("a second start: %v, want ErrTaken", err)
	}
	wfID := workflows.MigrationWorkflowID(id)
	var rows []Migration
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if rows, err = List(ctx, tc, AllMigrations+fmt.Sprintf(" AND WorkflowId = '%s'", wfID), 0); err != nil {
			t.Fatal(err)
		}
		if len(rows) == 1 {
			break
		}
	}
	if len(rows) != 1 || rows[0].ID != id || rows[0].Status != "running" || rows[0].Phase != string(workflows.PhasePlan) || rows[0].Summary != "add-node shard9: 1 move(s)" {
		t.Fatalf("listed: %+v", rows)
	}
	if running, err := Running(ctx, tc); err != nil || !strings.Contains(strings.Join(running, " "), wfID) {
		t.Errorf("running: %v, %v", running, err)
	}
	if polls, err := WorkerPolls(ctx, tc); err != nil || polls {
		t.Errorf("WorkerPolls with no worker: %v, %v", polls, err)
	}
	l, err := MigrationRuns(ctx, tc, id, []string{"m1"}, 5*time.Second)
	if err != nil || l.Running != wfID || !l.Migration.Found {
		t.Errorf("MigrationRuns of a running migration: %+v, %v", l, err)
	}

	if newest, err := NewestRunning(ctx, tc); err != nil || newest != id {
		t.Errorf("NewestRunning: %q, %v; want %s", newest, err, id)
	}
	if err := NoWorkerToAsk(ctx, tc, wfID, "start one"); err == nil || !strings.HasSuffix(err.Error(), "(workflow status: running): start one") {
		t.Errorf("NoWorkerToAsk of a running migration: %v", err)
	}
	nm := (*NoMigration)(nil)
	if err := NoWorkerToAsk(ctx, tc, workflows.MigrationWorkflowID("no-such"), "start one"); !errors.As(err, &nm) || nm.ID != "no-such" {
		t.Errorf("NoWorkerToAsk of an unknown migration: %v, want *NoMigration", err)
	}
	if _, err := State(ctx, tc, workflows.MigrationWorkflowID("no-such"), 5*time.Second); !errors.As(err, &nm) ||
		err.Error() != "no migration no-such (workflow reshard-no-such not found); reshard list shows them" {
		t.Errorf("State of an unknown migration: %v, want *NoMigration", err)
	}
	if _, err := State(ctx, tc, wfID, time.Second); err == nil || !strings.Contains(err.Error(), "no worker answered the state query of "+wfID+" within 1s (workflow status: running)") {
		t.Errorf("State with no worker: %v", err)
	}
	pause := Action{Verb: "pause", Update: workflows.UpdatePause, ID: id, RequestID: "r0", Timeout: time.Second, NoWorker: "no worker polls: start one"}
	noRecord := func(context.Context, topology.Request) error { t.Error("recorded a request never sent"); return nil }
	if _, err := Act(ctx, tc, pause, nil, noRecord); err == nil || err.Error() != "pause "+id+": no worker polls: start one; nothing was sent" {
		t.Errorf("Act with no worker: %v", err)
	}

	uid := UpdateID("pause", id, "r1")
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = Update(uctx, tc, wfID, workflows.UpdatePause, uid, nil)
	cancel()
	if err == nil || !(uctx.Err() != nil || Unanswered(err)) {
		t.Errorf("an Update with no worker: %v, want no answer", err)
	}
	if waiting, lost := UpdateWaiting(ctx, tc, wfID, uid); !waiting || lost {
		t.Errorf("UpdateWaiting of a held Update: waiting %v, lost %v", waiting, lost)
	}
	if waiting, lost := UpdateWaiting(ctx, tc, wfID, UpdateID("pause", id, "never-sent")); waiting || !lost {
		t.Errorf("UpdateWaiting of an Update never sent: waiting %v, lost %v", waiting, lost)
	}
	now := time.Now()
	ps := PendingOf(ctx, tc, wfID, []topology.Request{
		{UpdateID: UpdateID("pause", id, "never-sent"), Verb: "pause", RequestID: "never-sent", SentAt: now},
		{UpdateID: uid, Verb: "pause", RequestID: "r1", SentAt: now.Add(-time.Minute)},
	})
	if len(ps) != 2 || ps[0].RequestID != "r1" || ps[0].Lost || ps[1].RequestID != "never-sent" || !ps[1].Lost {
		t.Errorf("PendingOf: %+v, want r1 held, then never-sent lost", ps)
	}

	if err := tc.TerminateWorkflow(ctx, wfID, "", "test"); err != nil {
		t.Fatal(err)
	}
	run, err := Describe(ctx, tc, wfID, 5*time.Second)
	if err != nil || !run.Found || run.Running || run.Status != "terminated" || run.Phase != string(workflows.PhasePlan) {
		t.Errorf("Describe of a terminated migration: %+v, %v", run, err)
	}
	if l, err := MigrationRuns(ctx, tc, id, []string{"m1"}, 5*time.Second); err != nil || l.Running != "" || l.Migration.Status != "terminated" {
		t.Errorf("MigrationRuns of a terminated migration: %+v, %v", l, err)
	}
	if run, err := Describe(ctx, tc, workflows.MigrationWorkflowID("no-such"), 5*time.Second); err != nil || run.Found {
		t.Errorf("Describe of an unknown workflow: %+v, %v", run, err)
	}
	ended := (*Ended)(nil)
	if _, err := Act(ctx, tc, pause, nil, noRecord); !errors.As(err, &ended) || !strings.Contains(err.Error(), "has ended (terminated); nothing to pause. It may have left work behind") {
		t.Errorf("Act on a terminated migration: %v, want *Ended", err)
	}
	pause.ID = "no-such"
	if _, err := Act(ctx, tc, pause, nil, noRecord); !errors.As(err, &nm) || !strings.Contains(err.Error(), "reshard recover no-such brings") {
		t.Errorf("Act on an unknown migration: %v, want *NoMigration naming recover", err)
	}
	if _, err := Update(ctx, tc, workflows.MigrationWorkflowID("no-such"), workflows.UpdatePause, uid, nil); err == nil {
		t.Error("an Update to an unknown workflow succeeded")
	} else if nf := (*serviceerror.NotFound)(nil); !errors.As(err, &nf) {
		t.Errorf("an Update to an unknown workflow: %T %v, want NotFound", err, err)
	}
}
