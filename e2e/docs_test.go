//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/docblocks"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestDocs runs every ```sh block of README.md and docs/operations.md, as
// written, line by line, each block in a directory of its own against a
// local cluster of its own (the block's `dev up`, or its doc-test setup
// lines'), and fails naming the block and the line on a non-zero exit.
// The directory has bin/reshard (built from the tree; `reshard` runs it
// too) and deploy/ (the repository's), so a block runs as it would from a
// clone. How lines are run:
//   - a line ending with & runs in the background until its block ends;
//     one that exits meanwhile fails the block at its next line (a worker
//     whose --listen address (worker.listen of the cluster's reshard.yaml,
//     a free port dev up chose) another process holds: "bind: address
//     already in use");
//   - a line with --watch runs until its migration is in GRACE (where a
//     migration waits an hour for rollback or complete) or it exits;
//   - placeholders (docblocks.Placeholders) are replaced: <id> by the
//     migration the block started last, <shard database> and <control
//     database> by the local cluster's (psql gets the password in
//     PGPASSWORD, as reshard dev psql does);
//   - stdin is empty: `reshard dev psql shard1` opens psql, which exits.
//
// Blocks marked <!-- doc-test: skip <reason> --> are listed and not run
// (TestDocBlocksParse, in make test, still checks their reshard lines).
//
//	go test -tags e2e -timeout 30m -run TestDocs ./e2e/
func TestDocs(t *testing.T) {
	pgbin, err := devenv.FindPGBin()
	if err != nil {
		pgtest.Unavailable(t, err)
	}
	// psql is beside the servers: in the directory pg_ctl resolves to when
	// the one found is a link (/usr/local/bin/initdb -> /usr/lib/...).
	if p, err := filepath.EvalSymlinks(filepath.Join(pgbin, "pg_ctl")); err == nil {
		pgbin = filepath.Dir(p)
	}
	if _, err := os.Stat(filepath.Join(pgbin, "psql")); err != nil {
		pgtest.Unavailable(t, fmt.Errorf("no psql beside the PostgreSQL servers: %w", err))
	}
	temporal, err := devenv.FindTemporal()
	if err != nil {
		pgtest.Unavailable(t, err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ran, skipped []string
	for _, f := range docblocks.Files {
		blocks, err := docblocks.ReadFile(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.Skip != "" {
				skipped = append(skipped, fmt.Sprintf("%s (%s)", b, b.Skip))
				continue
			}
			t.Run(strings.NewReplacer("/", "_", ".md", "").Replace(b.String()), func(t *testing.T) {
				ran = append(ran, b.String())
				began := time.Now()
				d := &docRun{t: t, root: root, pgbin: pgbin, temporal: temporal}
				d.run(b)
				t.Logf("block %s: %d line(s) in %s", b, len(b.Setup)+len(b.Lines), time.Since(began).Round(time.Second))
			})
		}
	}
	t.Logf("ran %d block(s) in %s: %s", len(ran), time.Since(start).Round(time.Second), strings.Join(ran, ", "))
	t.Logf("skipped %d: %s", len(skipped), strings.Join(skipped, "; "))
	if len(ran) == 0 {
		t.Fatal("no block ran")
	}
}

// docRun is one block's run.
type docRun struct {
	t               *testing.T
	root            string // the repository
	pgbin, temporal string
	dir             string
	ids             []string // migrations started, in order
	bg              []*bgProc
}

type bgProc struct {
	line docblocks.Line
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error // set before done is closed
}

// startedRe is how add-node, rebalance and the other starts name the
// migration they started.
var startedRe = regexp.MustCompile(`(?m)^started migration (\S+):`)

// graceRe is a watch's line saying the migration reached GRACE.
var graceRe = regexp.MustCompile(`(?m)\bmigration GRACE\b`)

func (d *docRun) run(b docblocks.Block) {
	t := d.t
	d.dir = pgtest.TempDir(t, "reshard-docs-")
	if err := os.Mkdir(filepath.Join(d.dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(d.dir, "bin", "reshard")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(d.root, "deploy"), filepath.Join(d.dir, "deploy")); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: the block's processes stop
	// before the cluster they use does.
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(d.dir, ".reshard", "dev")); err != nil {
			return // the block destroyed it, or never made one
		}
		out, err := d.command(context.Background(), []string{"bin/reshard", "dev", "destroy"}).CombinedOutput()
		if err != nil {
			t.Errorf("dev destroy after block %s: %v\n%s", b, err, out)
		}
	})
	t.Cleanup(d.stopBackground)
	for _, l := range b.Setup {
		d.line(b, l, "setup ")
	}
	for _, l := range b.Lines {
		d.line(b, l, "")
	}
	if err := d.backgroundExited(); err != nil {
		t.Fatalf("block %s: %v", b, err)
	}
}

// backgroundExited names a background command of the block that exited
// (a worker that could not start, say): the lines after it would only
// wait for it.
func (d *docRun) backgroundExited() error {
	for _, p := range d.bg {
		select {
		case <-p.done:
			return fmt.Errorf("line %s: the background command exited before the block ended: %v\n%s", p.line, p.err, indent(tail(p.out.String(), 30)))
		default:
		}
	}
	return nil
}

// line runs one line of block b, failing the test on a non-zero exit.
func (d *docRun) line(b docblocks.Block, l docblocks.Line, kind string) {
	t := d.t
	t.Helper()
	if l.Err != nil {
		t.Fatalf("block %s, %sline %s: %v", b, kind, l, l.Err)
	}
	if !l.Known() {
		t.Fatalf("block %s, %sline %s: TestDocs does not know how to run %s", b, kind, l, l.Program())
	}
	if err := d.backgroundExited(); err != nil {
		t.Fatalf("block %s, before %sline %s: %v", b, kind, l, err)
	}
	args := d.substitute(b, l)
	t.Logf("%s:%d $ %s", l.File, l.Line, l.Text)
	if len(l.Placeholders()) > 0 {
		t.Logf("  as %q", args)
	}
	if l.Background {
		p := &bgProc{line: l, out: &syncBuffer{}, done: make(chan struct{})}
		p.cmd = d.command(context.Background(), args)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("block %s, %sline %s: %v", b, kind, l, err)
		}
		go func() { p.err = p.cmd.Wait(); close(p.done) }()
		d.bg = append(d.bg, p)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := d.command(ctx, args)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("block %s, %sline %s: %v", b, kind, l, err)
	}
	var err error
	if watch(args) {
		err = waitWatch(ctx, cmd, out, d.backgroundExited)
	} else {
		err = cmd.Wait()
	}
	t.Logf("  (%s)\n%s", time.Since(began).Round(100*time.Millisecond), indent(out.String()))
	if err != nil {
		for _, p := range d.bg {
			t.Logf("background %s:\n%s", p.line, indent(p.out.String()))
		}
		t.Fatalf("block %s, %sline %s: %v", b, kind, l, err)
	}
	for _, m := range startedRe.FindAllStringSubmatch(out.String(), -1) {
		d.ids = append(d.ids, m[1])
	}
}

func watch(args []string) bool {
	for _, a := range args {
		if a == "--watch" {
			return true
		}
	}
	return false
}

// waitWatch waits for a watching command to exit, or to print that its
// migration reached GRACE (then it is interrupted, as a reader would), or
// for bgErr to say a background command it may need has exited.
func waitWatch(ctx context.Context, cmd *exec.Cmd, out *syncBuffer, bgErr func() error) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("no GRACE within the line's time: %w", ctx.Err())
		case <-tick.C:
			bg := bgErr()
			if bg == nil && !graceRe.MatchString(out.String()) {
				continue
			}
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			return bg
		}
	}
}

// substitute replaces the line's placeholders.
func (d *docRun) substitute(b docblocks.Block, l docblocks.Line) []string {
	t := d.t
	t.Helper()
	var c *devenv.Cluster
	uri := func(name string) string {
		if c == nil {
			var err error
			if c, err = devenv.Load(filepath.Join(d.dir, ".reshard", "dev")); err != nil {
				t.Fatalf("block %s, line %s: %s needs the local cluster: %v", b, l, name, err)
			}
		}
		n, ok := c.Node(name)
		if !ok {
			t.Fatalf("block %s, line %s: the local cluster has no %s", b, l, name)
		}
		return n.DSN(devenv.Database, false)
	}
	args := make([]string, len(l.Args))
	for i, a := range l.Args {
		for _, p := range l.Placeholders() {
			if !strings.Contains(a, p) {
				continue
			}
			var v string
			switch p {
			case "<id>":
				if len(d.ids) == 0 {
					t.Fatalf("block %s, line %s: <id> but no migration was started before it", b, l)
				}
				v = d.ids[len(d.ids)-1]
			case "<shard database>":
				v = uri("shard1")
			case "<control database>":
				v = uri("control")
			default:
				t.Fatalf("block %s, line %s: TestDocs has no value for %s", b, l, p)
			}
			a = strings.ReplaceAll(a, p, v)
		}
		args[i] = a
	}
	return args
}

// command is args run in the block's directory: reshard (either spelling)
// is bin/reshard, psql is the one next to the servers, with the local
// cluster's password.
func (d *docRun) command(ctx context.Context, args []string) *exec.Cmd {
	prog := args[0]
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "RESHARD_") || strings.HasPrefix(k, "PG") || k == "PATH" || k == "TEMPORAL_CLI" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PATH="+filepath.Join(d.dir, "bin")+":"+d.pgbin+":"+os.Getenv("PATH"), "TEMPORAL_CLI="+d.temporal)
	switch prog {
	case "reshard", "bin/reshard":
		prog = filepath.Join(d.dir, "bin", "reshard")
	case "psql":
		prog = filepath.Join(d.pgbin, "psql")
		if c, err := devenv.Load(filepath.Join(d.dir, ".reshard", "dev")); err == nil && len(c.Nodes) > 0 {
			env = append(env, "PGPASSWORD="+string(c.Nodes[0].Password))
		}
	}
	cmd := exec.CommandContext(ctx, prog, args[1:]...)
	cmd.Dir, cmd.Env = d.dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// stopBackground interrupts the block's background commands and waits for
// them.
func (d *docRun) stopBackground() {
	for _, p := range d.bg {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		d.t.Logf("background %s:\n%s", p.line, indent(tail(p.out.String(), 20)))
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = append([]string{fmt.Sprintf("(%d lines before)", len(ls)-n)}, ls[len(ls)-n:]...)
	}
	return strings.Join(ls, "\n")
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// syncBuffer is a bytes.Buffer a process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
