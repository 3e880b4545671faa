package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// Shell completion offers the running migrations' ids to the operator
// actions and status, and the configured shards to add-node and --into
// (main completed nothing).
func TestDynamicCompletion(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	config, tc := temporalOnlyConfig(t)
	const id = "cmp-one"
	wfID := workflows.MigrationWorkflowID(id)
	if _, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: wfID, TaskQueue: workflows.TaskQueue},
		workflows.MigrationWorkflow, workflows.MigrationRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), wfID, "", "test ends") })
	// The visibility store lists a new workflow after a moment: retried.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "--config", config, ""}, id + "\trunning"},
		{[]string{"throttle", "--config", config, "cmp"}, id + "\trunning"},
		{[]string{"status", "--config", config, ""}, id + "\trunning"},
		{[]string{"add-node", "--config", config, "sh"}, "shard1"},
		{[]string{"split", "shard1", "--config", config, "--into", ""}, "shard1"},
		{[]string{"plan", "remove-node", "--config", config, ""}, "shard1"},
	} {
		var out string
		for range 50 {
			out, _ = run(t, append([]string{"__complete"}, tc.args...)...)
			if strings.Contains(out, tc.want+"\n") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !strings.Contains(out, tc.want+"\n") || !strings.Contains(out, ":4\n") {
			t.Errorf("completion of reshard %s: want %q and no file completion (:4)\n%s", strings.Join(tc.args, " "), tc.want, out)
		}
	}
}
