package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/reshard/reshard/internal/docblocks"
)

// TestDocBlocksParse: every line of every ```sh block of README.md and
// docs/operations.md (and every doc-test setup line) is one that e2e's
// TestDocs knows how to run, and each reshard line names a command, flags
// and arguments the CLI accepts; a make line names a target of the
// Makefile. A doc change that TestDocs would fail on for these reasons
// fails here, in make test, without a cluster.
func TestDocBlocksParse(t *testing.T) {
	targets := makeTargets(t)
	var blocks, lines, run int
	for _, f := range docblocks.Files {
		bs, err := docblocks.ReadFile("../..", f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bs {
			blocks++
			if b.Skip == "" {
				run++
			}
			for _, l := range append(append([]docblocks.Line{}, b.Setup...), b.Lines...) {
				lines++
				if err := checkDocLine(l, b.Skip != "", targets); err != nil {
					t.Errorf("block %s, line %s: %v", b, l, err)
				}
			}
		}
	}
	// README.md's Quick start, One database to four shards and Local
	// cluster; operations.md's migration and privileges blocks.
	if run < 5 || lines < 30 {
		t.Fatalf("%d blocks (%d run), %d lines: the files or the parser changed", blocks, run, lines)
	}
	t.Logf("%d blocks (%d run by TestDocs), %d lines", blocks, run, lines)
}

// TestDocLineChecked: checkDocLine refuses what the CLI or TestDocs would.
func TestDocLineChecked(t *testing.T) {
	targets := map[string]bool{"test": true}
	for _, c := range []struct {
		line    string
		skipped bool
		want    string // "" for accepted
	}{
		{"bin/reshard plan add-node shard5 --rows-per-sec 20000", false, ""},
		{"reshard rollback <id>", false, ""},
		{"bin/reshard dev psql shard1 -- -f deploy/schema.sql", false, ""},
		{"bin/reshard worker &", false, ""},
		{"make test", true, ""},
		{"bin/reshard plan addnode shard5", false, "unknown command"},
		{"bin/reshard plan add-node shard5 --rows-per-second 5", false, "unknown flag"},
		{"bin/reshard dev up [--shards N]", false, `unknown command "[--shards"`},
		{"bin/reshard rollback", false, "accepts 1 arg"},
		{"bin/reshard dev", false, "runs nothing"},
		{"reshard status <migration>", false, "placeholder"},
		{"make test", false, "does not know how to run"},
		{"make tset", true, "no target"},
		{"docker compose up", false, "does not know how to run"},
		{"docker compose up", true, ""},
		{"bin/reshard list | head", false, "shell"},
	} {
		bs, err := docblocks.Parse("x.md", "```sh\n"+c.line+"\n```\n")
		if err != nil {
			t.Fatal(err)
		}
		err = checkDocLine(bs[0].Lines[0], c.skipped, targets)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q refused: %v", c.line, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want an error with %q", c.line, err, c.want)
		}
	}
}

// checkDocLine is nil when TestDocs can run l (or, in a skipped block, when
// it is at least a valid reshard or make line, or another program).
func checkDocLine(l docblocks.Line, skipped bool, makeTargets map[string]bool) error {
	if l.Err != nil {
		return l.Err
	}
	for _, p := range l.Placeholders() {
		if _, ok := docblocks.Placeholders[p]; !ok {
			return fmt.Errorf("placeholder %s: TestDocs replaces only those of docblocks.Placeholders", p)
		}
	}
	switch l.Program() {
	case "reshard":
		return checkReshardArgs(l.Args[1:])
	case "make":
		for _, a := range l.Args[1:] {
			if !strings.Contains(a, "=") && !makeTargets[a] {
				return fmt.Errorf("the Makefile has no target %q", a)
			}
		}
	}
	if !l.Known() && !skipped {
		return fmt.Errorf("TestDocs does not know how to run %s (it runs %s): add it to TestDocs or mark the block <!-- doc-test: skip <reason> -->",
			l.Program(), strings.Join(docblocks.Programs, ", "))
	}
	return nil
}

// checkReshardArgs parses args as the CLI would, without running anything.
func checkReshardArgs(args []string) error {
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if !cmd.Runnable() && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		return fmt.Errorf("unknown command %q for %q", rest[0], cmd.CommandPath())
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%q runs nothing: name one of its subcommands", cmd.CommandPath())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return nil
}

// makeTargets are the targets of the repository's Makefile.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9_-]*):`).FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	if len(out) == 0 {
		t.Fatal(errors.New("no target found in the Makefile"))
	}
	return out
}
