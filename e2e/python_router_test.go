package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/testkit/pgtest"
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

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
