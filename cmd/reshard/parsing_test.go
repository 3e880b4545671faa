package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// Every command's --help has examples, and each example line is the
// command itself with flags it has (main had examples on 7 commands).
func TestEveryCommandHasExamples(t *testing.T) {
	for _, p := range commandPaths(newRootCmd(), nil) {
		name := strings.TrimSpace("reshard " + strings.Join(p, " "))
		root := newRootCmd()
		c, _, err := root.Find(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: no example in --help", name)
			continue
		}
		for _, line := range strings.Split(c.Example, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "--") {
				continue // a comment, or the continuation of a long line
			}
			if strings.HasSuffix(line, `\`) {
				line = strings.TrimSuffix(line, `\`)
			}
			first, _, _ := strings.Cut(line, "&&")
			args, err := splitWords(first)
			if err != nil || len(args) == 0 || args[0] != "reshard" {
				t.Errorf("%s: example %q does not run reshard", name, line)
				continue
			}
			ec, rest, err := newRootCmd().Find(args[1:])
			if err != nil {
				t.Errorf("%s: example %q: %v", name, line, err)
				continue
			}
			if err := ec.ParseFlags(rest); err != nil {
				t.Errorf("%s: example %q: %v", name, line, err)
			}
		}
	}
}

// splitWords splits a shell line into words; single quotes group (the
// examples use no other quoting).
func splitWords(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
		quoted bool
	)
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// status and the operator actions take the workflow id (reshard-<id>, as
// the UI and status print it) as well as the migration id; main looked for
// workflow reshard-reshard-<id> and said there is no such migration.
func TestWorkflowIDsAccepted(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	config, tc := temporalOnlyConfig(t)
	const id = "ids-one"
	wfID := workflows.MigrationWorkflowID(id)
	if _, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: wfID, TaskQueue: workflows.TaskQueue},
		workflows.MigrationWorkflow, workflows.MigrationRequest{ID: id}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), wfID, "", "test ends") })
	for _, arg := range []string{id, wfID} {
		// No worker runs: status says so at once, naming the right workflow.
		out, code := run(t, "status", arg, "--config", config, "--timeout", "1s")
		if code != 1 || !strings.Contains(out, "no worker can answer the state query of "+wfID+" ") {
			t.Errorf("status %s: exit %d\n%s", arg, code, out)
		}
		out, code = run(t, "pause", arg, "--config", config, "--timeout", "2s")
		if code != 1 || !strings.Contains(out, "pause "+id+": no reshard worker polls") {
			t.Errorf("pause %s: exit %d\n%s", arg, code, out)
		}
	}
}
