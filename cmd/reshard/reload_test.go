package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// A running worker reports the shards it knows and picks up a shard added
// to its configuration file without a restart; until it has, a migration
// to that shard is refused before anything starts (main started it, and the
// workflow failed 0.5 s later telling the user to add the shard to a file
// that already had it).
func TestWorkerReloadsConfigAndCLIRefusesUnknownShards(t *testing.T) {
	ctx := context.Background()
	control := pgtest.NewDB(t, 0)
	shard1, shard2 := pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	tt := pgtest.Temporal(t)
	wc := devenv.WorkerConfig{Control: control.DSN, Shards: map[string]string{"shard1": shard1.DSN},
		Temporal: devenv.TemporalConfig{Address: tt.Address(), Namespace: devenv.Namespace}}
	path := filepath.Join(t.TempDir(), "reshard.yaml")
	writeWorkerConfig(t, path, wc)
	startWorkerAt(t, path)

	if err := topology.Migrate(ctx, control.Pool); err != nil {
		t.Fatal(err)
	}
	store := topology.NewStore(control.Pool)
	knows := func(shard string) bool {
		ws, err := store.Workers(ctx, workflows.TaskQueue)
		if err != nil {
			t.Fatal(err)
		}
		return len(topology.UnknownToWorkers(ws, []string{shard})) == 0 && len(ws) > 0
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30s: %s", what)
			}
		}
	}
	waitFor("the worker reports shard1", func() bool { return knows("shard1") })
	plan := &migrationPlan{Pairs: []movePair{{Source: "shard1", Target: "shard2"}}}
	err := checkWorkersKnow(ctx, store, plan)
	if _, bad := err.(usageError); !bad || !strings.Contains(err.Error(), "shard2") || !strings.Contains(err.Error(), "nothing was started") {
		t.Fatalf("a migration to a shard no worker knows: %v", err)
	}

	wc.Shards["shard2"] = shard2.DSN
	written := time.Now()
	writeWorkerConfig(t, path, wc)
	waitFor("the worker reloads its configuration and reports shard2", func() bool { return knows("shard2") })
	// The worker reports as soon as it reloaded (main waited for its next
	// periodic report: up to configPoll + WorkerReportEvery, 7s).
	if took := time.Since(written); took > configPoll+2500*time.Millisecond {
		t.Errorf("the worker reported shard2 %s after the file changed; want within %s", took.Round(time.Millisecond), configPoll+2500*time.Millisecond)
	} else {
		t.Logf("shard2 reported %s after the file changed", took.Round(time.Millisecond))
	}
	if err := checkWorkersKnow(ctx, store, plan); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	ws, _ := store.Workers(ctx, workflows.TaskQueue)
	if len(ws) != 1 || !slices.Equal(ws[0].Shards, []string{"shard1", "shard2"}) {
		t.Fatalf("workers %+v", ws)
	}
	for _, w := range ws {
		for _, s := range w.Shards {
			if strings.Contains(s, "postgres://") {
				t.Fatalf("a DSN in reshard.workers: %q", s)
			}
		}
	}
}
