package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reshard/reshard/internal/ledger"
	"github.com/reshard/reshard/internal/pgtest"
	"github.com/reshard/reshard/workflows"
)

// The second-language router (examples/python, written from
// docs/contract.md only) as a writer through a real add-node.

const pythonDir = "../examples/python"

// pythonWithPsycopg finds a python3 that imports psycopg2 ($RESHARD_PYTHON
// first, then Debian's, then PATH's).
func pythonWithPsycopg(t *testing.T) string {
	t.Helper()
	var cands []string
	if p := os.Getenv("RESHARD_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	var errs []string
	for _, p := range cands {
		out, err := exec.Command(p, "-c", "import psycopg2").CombinedOutput()
		if err == nil {
			return p
		}
		errs = append(errs, fmt.Sprintf("%s: %v %s", p, err, bytes.TrimSpace(out)))
	}
	pgtest.Unavailable(t, fmt.Errorf("no python3 with psycopg2 (Debian: apt-get install python3-psycopg2): %s", strings.Join(errs, "; ")))
	return ""
}

// TestPythonRouterTokens runs the Python router's own tests: its token
// functions against the vectors PostgreSQL wrote, its range lookup at the
// bounds.
func TestPythonRouterTokens(t *testing.T) {
	py := pythonWithPsycopg(t)
	cmd := exec.Command(py, "test_tokens.py", "-v")
	cmd.Dir = pythonDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 test_tokens.py: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// pyOutcome is one line of the Python writer's outcome file.
type pyOutcome struct {
	K  int64   `json:"k"`
	V  *string `json:"v"`
	OK bool    `json:"ok"`
}

// pySummary is the Python writer's last line.
type pySummary struct {
	Acked        int64    `json:"acked"`
	Unknown      int64    `json:"unknown"`
	Reads        int64    `json:"reads"`
	StaleReads   int64    `json:"stale_reads"`
	FenceRetries int64    `json:"fence_retries"`
	Versions     []int64  `json:"versions"`
	Errors       []string `json:"errors"`
}

// readOutcomes builds a ledger from the writer's outcome file (one writer
// per key, lines in write order) and counts the acknowledged writes.
func readOutcomes(t *testing.T, path string) (*ledger.Ledger, int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := ledger.New()
	var acked int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o pyOutcome
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("outcome line %q: %v", sc.Text(), err)
		}
		v := ledger.Value{Deleted: true}
		if o.V != nil {
			v = ledger.Value{V: *o.V}
		}
		if o.OK {
			l.Ack(o.K, v)
			acked++
		} else {
			l.Unknown(o.K, v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return l, acked
}

// pyWriter is the Python router's writer (examples/python/writer.py)
// running as a child process, recording its outcomes in a file.
type pyWriter struct {
	t              *testing.T
	cmd            *exec.Cmd
	acked          string
	stdout, stderr bytes.Buffer
	exited         chan struct{}
	waitErr        error
}

// startPythonWriter starts the writer on keys ("lo-hi") of users and waits
// for its first 50 outcomes.
func startPythonWriter(t *testing.T, py string, c *cluster, keys string) *pyWriter {
	t.Helper()
	w := &pyWriter{t: t, acked: filepath.Join(c.dir, "python-acked.jsonl"), exited: make(chan struct{})}
	w.cmd = exec.Command(py, "writer.py", "--control", c.ctl.DSN, "--table", "public.users", "--key", "id", "--val", "name",
		"--keys", keys, "--acked", w.acked, "--workers", "2")
	w.cmd.Dir = pythonDir
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, &w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.waitErr = w.cmd.Wait(); close(w.exited) }()
	t.Cleanup(func() {
		select {
		case <-w.exited:
		default:
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for countLines(w.acked) < 50 {
		select {
		case <-w.exited:
			t.Fatalf("the Python writer exited before writing: %v\n%s%s", w.waitErr, w.stdout.String(), w.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Python writer wrote %d outcomes in 30 s\n%s", countLines(w.acked), w.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return w
}

// finish stops the writer (SIGTERM) and returns its summary and the ledger
// of its outcomes with the number of acknowledged writes.
func (w *pyWriter) finish() (pySummary, *ledger.Ledger, int64) {
	t := w.t
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.exited:
		if w.waitErr != nil {
			t.Fatalf("the Python writer: %v\n%s", w.waitErr, w.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the Python writer did not stop on SIGTERM\n%s", w.stderr.String())
	}
	var sum pySummary
	line, ok := strings.CutPrefix(lastLine(w.stdout.String()), "summary ")
	if !ok {
		t.Fatalf("no summary from the Python writer:\n%s\n%s", w.stdout.String(), w.stderr.String())
	}
	if err := json.Unmarshal([]byte(line), &sum); err != nil {
		t.Fatal(err)
	}
	l, n := readOutcomes(t, w.acked)
	if n == 0 || n != sum.Acked {
		t.Fatalf("the outcome file has %d acknowledged writes, the writer says %d", n, sum.Acked)
	}
	return sum, l, n
}

func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// TestPythonRouterThroughAddNode: the Python writer and the Go writers
// write throughout an add-node whose worker is SIGKILLed once in
// SNAPSHOT_COPY; after it, every write the Python writer acknowledged is on
// the owner of its key and nowhere else (0 lost, 0 duplicated), its strict
// read-backs saw every acknowledged value, and the control database says
// every move ended with the old owner cleaned (reshard.moves, settled).
func TestPythonRouterThroughAddNode(t *testing.T) {
	py := pythonWithPsycopg(t)
	c := newCluster(t, 5_000)
	if out, code := c.cli("keyspace", "add-table", "users:id", "orders:user_id"); code != 0 {
		t.Fatalf("keyspace add-table: exit %d\n%s", code, out)
	}
	c.startWorker()
	c.startWriters()

	pyw := startPythonWriter(t, py, c, "2000001-2000300")

	started := time.Now()
	req := c.request("e2e_py")
	req.Throttle = workflows.Throttle{RowsPerSec: 100} // a copy long enough to kill the worker in
	run := c.start(req)
	killed := false
	deadline := time.Now().Add(3 * time.Minute)
	for !killed {
		st, ok := c.state(run.GetID())
		if ok {
			if m, hit := anyIn(st, workflows.PhaseSnapshotCopy); hit {
				c.killWorker()
				c.startWorker()
				killed = true
				t.Logf("worker killed with move %s in SNAPSHOT_COPY", m)
			} else if beyond(st, workflows.PhaseSnapshotCopy) || st.Phase.Terminal() {
				t.Fatalf("no move was seen in SNAPSHOT_COPY (moves: %s)", phasesNow(st))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the migration never reached SNAPSHOT_COPY: %s", c.describe(run.GetID()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := c.wait(run, time.Until(deadline)+time.Minute)
	t.Logf("add-node with the worker killed once: %s, moves: %s", time.Since(started).Round(time.Second), summary(st))
	// A little more on the final topology, then stop the Python writer.
	time.Sleep(time.Second)
	sum, l, _ := pyw.finish()
	c.stopWriters()
	checkState(t, st, false)
	c.checkData(st) // every user on its owner, once; the Go writers' ledger

	ctx := context.Background()
	cur, err := c.store.Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Python writer: %d acknowledged, %d unknown, %d strict reads, %d fence retries, topology versions written with %v; errors: %v",
		sum.Acked, sum.Unknown, sum.Reads, sum.FenceRetries, sum.Versions, sum.Errors)
	mm, err := l.Check(ctx, usersTable, c.pools, cur.Ring.OwnerInt64)
	if err != nil {
		t.Fatal(err)
	}
	if len(mm) > 0 {
		var s []string
		for _, m := range mm[:min(len(mm), 10)] {
			s = append(s, m.String())
		}
		t.Fatalf("%d writes the Python router acknowledged are lost or wrong: %s", len(mm), strings.Join(s, "; "))
	}
	// The router retries fence refusals (a cutover's write pause is far
	// below its 10 s budget) and nothing else failed here: no write may end
	// with an unknown outcome.
	if sum.Unknown != 0 {
		t.Fatalf("%d writes of the Python router failed: %v", sum.Unknown, sum.Errors)
	}
	if sum.StaleReads != 0 || sum.Reads == 0 {
		t.Fatalf("strict reads: %d of %d returned another value than the acknowledged one: %v", sum.StaleReads, sum.Reads, sum.Errors)
	}
	// It followed the topology to the end: it wrote under the final version.
	if !slices.Contains(sum.Versions, cur.Version) || len(sum.Versions) < 2 {
		t.Fatalf("the Python router wrote with versions %v; the final one is v%d", sum.Versions, cur.Version)
	}
	// The control database says the move is over: every move cleaned up,
	// every range settled.
	var cleaned int64
	var settled bool
	if err := c.ctl.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'cleaned_up'), reshard.settled('default') FROM reshard.moves WHERE migration_id = $1`, req.ID).
		Scan(&cleaned, &settled); err != nil {
		t.Fatal(err)
	}
	if cleaned != int64(len(st.Moves)) || !settled {
		t.Fatalf("reshard.moves: %d of %d moves cleaned up, keyspace settled: %v", cleaned, len(st.Moves), settled)
	}
	if out, code := c.cli("check", "placement"); code != 0 {
		t.Fatalf("reshard check placement after the add-node: exit %d\n%s", code, out)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
