package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/workflows"
)

// Migration is one migration as the visibility store knows it: no worker
// is needed to list them.
type Migration struct {
	ID         string    `json:"id"`
	WorkflowID string    `json:"workflow_id"`
	Status     string    `json:"status"` // running, completed, failed, terminated, ...
	Phase      string    `json:"phase"`  // the ReshardPhase search attribute
	Summary    string    `json:"summary"`
	Started    time.Time `json:"started"`
	Closed     time.Time `json:"closed,omitzero"`
}

// AllMigrations is the visibility query of every Migration workflow;
// RunningMigrations of the running ones.
var (
	AllMigrations     = fmt.Sprintf("WorkflowType = '%s'", workflows.MigrationWorkflow)
	RunningMigrations = AllMigrations + " AND ExecutionStatus = 'Running'"
)

// List runs a visibility query and returns the migrations, newest first;
// limit 0 means all.
func List(ctx context.Context, tc client.Client, query string, limit int) ([]Migration, error) {
	var rows []Migration
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 100})
		if err != nil {
			return nil, fmt.Errorf("list migrations: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			r := Migration{
				WorkflowID: e.GetExecution().GetWorkflowId(),
				Status:     StatusText(e.GetStatus()),
				Phase:      PayloadString(e.GetSearchAttributes().GetIndexedFields()[workflows.SAPhase.GetName()]),
				Summary:    PayloadString(e.GetMemo().GetFields()["summary"]),
				Started:    e.GetStartTime().AsTime(),
			}
			r.ID = IDOf(r.WorkflowID)
			if e.GetCloseTime() != nil {
				r.Closed = e.GetCloseTime().AsTime()
			}
			rows = append(rows, r)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 || (limit > 0 && len(rows) >= limit) {
			break
		}
	}
	slices.SortStableFunc(rows, func(a, b Migration) int { return b.Started.Compare(a.Started) })
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	return rows, nil
}

// Running lists the workflow ids of running Migration workflows. Two
// operators starting at the same moment can both find none; the workflows'
// compare-and-set on the topology version refuses the second.
func Running(ctx context.Context, tc client.Client) ([]string, error) {
	rows, err := List(ctx, tc, RunningMigrations, 0)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.WorkflowID)
	}
	return ids, nil
}

// IDOf is the migration id of a workflow id or of a migration id: every
// command that takes an id takes both (reshard-<id>, as the Temporal UI
// and status print it).
func IDOf(workflowID string) string {
	return strings.TrimPrefix(workflowID, workflows.MigrationWorkflowID(""))
}

// StatusText is a workflow's status in lower case: running, completed,
// failed, terminated ...
func StatusText(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// PayloadString decodes a string payload (a search attribute, a memo
// field); "" when there is none or it is not a string.
func PayloadString(p *commonpb.Payload) string {
	var s string
	if p == nil || converter.GetDefaultDataConverter().FromPayload(p, &s) != nil {
		return ""
	}
	return s
}

// ErrTaken: a workflow with the migration's id exists (running or ended);
// ids are never reused.
var ErrTaken = errors.New("the migration id is taken")

// Start starts the Migration workflow of req (its id checked and planned
// by the caller) with the plan's summary and details for the UI, and
// returns its run id. An id already used is ErrTaken.
func Start(ctx context.Context, tc client.Client, req workflows.MigrationRequest, summary, details string) (string, error) {
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       workflows.MigrationWorkflowID(req.ID),
		TaskQueue:                                workflows.TaskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            summary,
		StaticDetails:                            details,
		Memo:                                     map[string]any{"summary": summary},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			workflows.SAMigration.ValueSet(req.ID), workflows.SAPhase.ValueSet(string(workflows.PhasePlan))),
	}, workflows.MigrationWorkflow, req)
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return "", fmt.Errorf("start migration %s: %w", req.ID, ErrTaken)
		}
		return "", fmt.Errorf("start migration %s: %w", req.ID, err)
	}
	return run.GetRunID(), nil
}
