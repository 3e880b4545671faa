package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/reshard/reshard/workflows"
)

// migrationRow is one migration as the visibility store knows it: no worker
// is needed to list them.
type migrationRow struct {
	ID         string    `json:"id"`
	WorkflowID string    `json:"workflow_id"`
	Status     string    `json:"status"` // running, completed, failed, terminated, ...
	Phase      string    `json:"phase"`  // the ReshardPhase search attribute
	Summary    string    `json:"summary"`
	Started    time.Time `json:"started"`
	Closed     time.Time `json:"closed,omitzero"`
}

func newListCmd(opts *globalOptions) *cobra.Command {
	var (
		cf     configFlags
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--limit 20] [--json]",
		Short: "Migrations, running and recent, newest first, with status and phase",
		Long: `Lists Migration workflows from Temporal's visibility store: id, workflow
status, phase (the ReshardPhase search attribute the workflows keep current),
start and close time, and what each one does. Needs no worker.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usageError{fmt.Errorf("--limit %d: want 1 or more", limit)}
			}
			cfg, err := cf.load(opts)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			tc, err := cfg.dialTemporal(ctx, opts)
			if err != nil {
				return err
			}
			defer tc.Close()
			rows, err := listMigrations(ctx, tc, fmt.Sprintf("WorkflowType = '%s'", workflows.MigrationWorkflow), limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return topoWriteJSON(out, topoNonNil(rows))
			}
			if len(rows) == 0 {
				fmt.Fprintln(out, "no migrations yet; plan one with reshard plan add-node <shard> --table t:key")
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATUS\tPHASE\tSTARTED\tCLOSED\tWHAT")
			for _, r := range rows {
				closed := "-"
				if !r.Closed.IsZero() {
					closed = r.Closed.Local().Format(time.DateTime)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Status, topoDash(r.Phase), r.Started.Local().Format(time.DateTime), closed, topoDash(r.Summary))
			}
			return w.Flush()
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 20, "migrations to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// payloadString decodes a string payload (a search attribute, a memo
// field); "" when there is none or it is not a string.
func payloadString(p *commonpb.Payload) string {
	var s string
	if p == nil || converter.GetDefaultDataConverter().FromPayload(p, &s) != nil {
		return ""
	}
	return s
}

// listMigrations runs a visibility query and returns the migrations, newest
// first; limit 0 means all.
func listMigrations(ctx context.Context, tc client.Client, query string, limit int) ([]migrationRow, error) {
	var rows []migrationRow
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 100})
		if err != nil {
			return nil, fmt.Errorf("list migrations: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			r := migrationRow{
				WorkflowID: e.GetExecution().GetWorkflowId(),
				Status:     statusText(e.GetStatus()),
				Phase:      payloadString(e.GetSearchAttributes().GetIndexedFields()[workflows.SAPhase.GetName()]),
				Summary:    payloadString(e.GetMemo().GetFields()["summary"]),
				Started:    e.GetStartTime().AsTime(),
			}
			r.ID = migrationIDOf(r.WorkflowID)
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
	slices.SortStableFunc(rows, func(a, b migrationRow) int { return b.Started.Compare(a.Started) })
	if limit > 0 && len(rows) > limit {
		rows = rows[:limit]
	}
	return rows, nil
}
