package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
)

// TestReplayRecordedHistories replays histories recorded from real runs
// (e2e with RESHARD_RECORD_HISTORIES=1: an add-node with writers, and one
// whose worker was killed in every phase; v2-rollback a verify failure
// before the verdict-stops-stream and reverify-kept versions; v4-split-reverify
// a failed verify, the wait for its verdict with the stream stopped and a
// reverify, both versions recorded) against the current workflow code: a
// change that alters the commands of a recorded run without
// workflow.GetVersion fails here.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata/histories")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			Register(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
