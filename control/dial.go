package control

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// Dial connects to the Temporal frontend at address, in namespace, within
// 15 s; the SDK logs through logger (nil: the SDK's default). The error
// names both and how to check that Temporal runs.
func Dial(ctx context.Context, address, namespace string, logger *slog.Logger) (client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var l sdklog.Logger
	if logger != nil {
		l = sdklog.NewStructuredLogger(logger)
	}
	tc, err := client.DialContext(ctx, client.Options{HostPort: address, Namespace: namespace, Logger: l})
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s (namespace %s): %w; is it running? (reshard dev status)", address, namespace, err)
	}
	return tc, nil
}

// UILink is the Temporal UI page of a workflow ("" without a UI address):
// with its run id, the User Metadata tab, where its summary and current
// details (the progress) are; without, the workflow's page (the UI opens
// its History).
func UILink(ui, namespace, workflowID, runID string) string {
	if ui == "" {
		return ""
	}
	page := ui + "/namespaces/" + url.PathEscape(namespace) + "/workflows/" + url.PathEscape(workflowID)
	if runID != "" {
		page += "/" + url.PathEscape(runID) + "/user-metadata"
	}
	return page
}

// RunID is the run id of a workflow's newest run ("" when Temporal cannot
// say within 5 s: a link then opens the workflow's page).
func RunID(ctx context.Context, tc client.Client, workflowID string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d, err := tc.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return ""
	}
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}
