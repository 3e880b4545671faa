package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// Every migration setting has one default: the CLI flag's default, the
// workflow's for a request that leaves it unset (WithDefaults), and the
// Settings table of docs/operations.md say the same.
func TestKnobsAgree(t *testing.T) {
	wf := workflows.MigrationRequest{}.WithDefaults()
	knobs := map[string]string{ // flag → the workflow's default, as the flag prints it
		"vnodes":              fmt.Sprint(wf.VNodes),
		"tokens":              wf.Tokens,
		"rows-per-sec":        fmt.Sprint(wf.Throttle.RowsPerSec),
		"bytes-per-sec":       fmt.Sprint(wf.Throttle.BytesPerSec),
		"copy-chunk-rows":     fmt.Sprint(wf.ChunkRows),
		"verify-chunk-rows":   fmt.Sprint(wf.VerifyChunkRows),
		"max-lag-bytes":       fmt.Sprint(wf.MaxLagBytes),
		"cutover-budget":      wf.CutoverBudget.String(),
		"require-approval":    fmt.Sprint(wf.RequireApproval),
		"on-verify-fail":      string(wf.OnVerifyFail),
		"grace":               wf.Grace().String(),
		"max-parallel-moves":  fmt.Sprint(wf.MaxParallelMoves),
		"max-moves-per-shard": fmt.Sprint(wf.MaxMovesPerShard),
		// The adaptive limits: none watched unless given (Throttle.Adaptive nil).
		"max-source-latency-increase": "0",
		"max-probe-latency":           "0s",
		"max-replica-lag":             "0s",
		"max-slot-wal":                "0",
		"max-active-backends":         "0",
	}
	// The domain packages' own fallbacks, for a zero option, are the
	// workflow's defaults.
	for _, d := range []struct {
		what      string
		got, want any
	}{
		{"ring.DefaultVNodes", ring.DefaultVNodes, workflows.DefaultVNodes},
		{"ring's default allocation", string(ring.AllocBalanced), workflows.DefaultTokens},
		{"backfill.DefaultChunkRows", backfill.DefaultChunkRows, workflows.DefaultCopyChunkRows},
		{"verify.DefaultChunkRows", verify.DefaultChunkRows, workflows.DefaultVerifyChunkRows},
		{"cutover.DefaultBudget", cutover.DefaultBudget, workflows.DefaultCutoverBudget},
	} {
		if d.got != d.want {
			t.Errorf("%s is %v, the workflow's default %v", d.what, d.got, d.want)
		}
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []workflows.Kind{workflows.KindAddNode, workflows.KindSplit, workflows.KindRemoveNode, workflows.KindMove} {
		for _, dry := range []bool{false, true} {
			cmd := newMigrationCmd(&globalOptions{}, kind, dry)
			for flag, want := range knobs {
				f := cmd.Flags().Lookup(flag)
				if f == nil {
					t.Errorf("%s (plan %v) has no --%s", kind, dry, flag)
					continue
				}
				if f.DefValue != want {
					t.Errorf("%s --%s defaults to %s, the workflow to %s", kind, flag, f.DefValue, want)
				}
			}
		}
	}
	for flag, want := range knobs {
		row := regexp.MustCompile("(?m)^\\| `--" + regexp.QuoteMeta(flag) + "` \\| ([^|]+) \\|").FindSubmatch(doc)
		if row == nil {
			t.Errorf("docs/operations.md has no Settings row for --%s", flag)
			continue
		}
		if got := strings.TrimSpace(string(row[1])); got != want {
			t.Errorf("docs/operations.md: --%s defaults to %s, the workflow to %s", flag, got, want)
		}
	}
}
