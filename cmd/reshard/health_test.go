package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// startWorker runs runWorker on a free port with the configuration wc and
// returns the base URL of its HTTP endpoint.
func startWorker(t *testing.T, wc devenv.WorkerConfig) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "reshard.yaml")
	writeWorkerConfig(t, path, wc)
	return startWorkerAt(t, path)
}

func writeWorkerConfig(t *testing.T, path string, wc devenv.WorkerConfig) {
	t.Helper()
	b, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startWorkerAt is startWorker with the configuration file at path.
func startWorkerAt(t *testing.T, path string) string {
	t.Helper()
	opts := &globalOptions{logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg, err := (&configFlags{path: path}).load(opts)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := devenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// A short capacity probe: the tests' migrations are small, and each
	// PLAN watched the WAL for 2 s.
	go func() {
		done <- runWorker(ctx, opts, cfg, workerFlags{listen: addr, walWindow: 200 * time.Millisecond})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := get(t, base+"/livez"); code == http.StatusOK {
			return base
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker's /livez does not answer 200 after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /healthz and /readyz answer 503 naming the control database or Temporal
// when either does not answer (main said ok with the control DB down).
func TestWorkerHealthChecksDependencies(t *testing.T) {
	t.Cleanup(pgtest.Shutdown)
	control := pgtest.NewDB(t, 0)
	tt := pgtest.Temporal(t)
	good := devenv.WorkerConfig{Control: control.DSN, Shards: map[string]string{"shard1": control.DSN},
		Temporal: devenv.TemporalConfig{Address: tt.Address(), Namespace: devenv.Namespace}}
	bad := good
	bad.Control = "postgres://reshard@127.0.0.1:1/control?sslmode=disable" // nothing listens there

	up := startWorker(t, good)
	down := startWorker(t, bad)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, up+path); code != http.StatusOK || !strings.Contains(body, "control database: ok") || !strings.Contains(body, "temporal: ok") {
			t.Errorf("%s with everything up: %d\n%s", path, code, body)
		}
		if code, body := get(t, down+path); code != http.StatusServiceUnavailable || !strings.Contains(body, "control database: ") ||
			strings.Contains(body, "control database: ok") || !strings.Contains(body, "temporal: ok") {
			t.Errorf("%s with the control database down: %d\n%s", path, code, body)
		}
	}
	// Every server stops: Temporal too.
	pgtest.Shutdown()
	code, body := get(t, up+"/healthz")
	if code != http.StatusServiceUnavailable || strings.Contains(body, "control database: ok") || strings.Contains(body, "temporal: ok") {
		t.Errorf("/healthz with the control database and Temporal down: %d\n%s", code, body)
	}
	if code, _ := get(t, up+"/livez"); code != http.StatusOK {
		t.Errorf("/livez of a running worker: %d", code)
	}
}
