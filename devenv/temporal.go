package devenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// TemporalVersion is the pinned Temporal CLI that `make tools` installs.
const TemporalVersion = "v1.5.1"

// TemporalInstallHint is the fix printed when the temporal CLI is missing.
const TemporalInstallHint = "install the pinned Temporal CLI: make tools (go install github.com/temporalio/cli/cmd/temporal@" + TemporalVersion + "), or set TEMPORAL_CLI to its path"

// Namespace is the Temporal namespace reshard uses.
const Namespace = "reshard"

// SearchAttributes are registered on the dev server for the workflows.
var SearchAttributes = []string{
	"ReshardPhase=Keyword",
	"ReshardMigration=Keyword",
	"ReshardSource=Keyword",
	"ReshardTarget=Keyword",
}

// ErrNoTemporal means the temporal CLI was not found.
var ErrNoTemporal = errors.New("temporal CLI not found; " + TemporalInstallHint)

// FindTemporal returns the temporal CLI: $TEMPORAL_CLI, PATH, then
// $(go env GOPATH)/bin.
func FindTemporal() (string, error) {
	if p := os.Getenv("TEMPORAL_CLI"); p != "" {
		if isExec(p) {
			return p, nil
		}
		return "", fmt.Errorf("TEMPORAL_CLI=%s is not an executable; %s", p, TemporalInstallHint)
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	var candidates []string
	if gp := os.Getenv("GOPATH"); gp != "" {
		candidates = append(candidates, filepath.Join(gp, "bin", "temporal"))
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		candidates = append(candidates, filepath.Join(strings.TrimSpace(string(out)), "bin", "temporal"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, "go", "bin", "temporal"))
	}
	for _, p := range candidates {
		if isExec(p) {
			return p, nil
		}
	}
	return "", ErrNoTemporal
}

// Temporal is a running (or recorded) Temporal dev server.
type Temporal struct {
	Port   int    `json:"port"`
	UIPort int    `json:"ui_port"`
	DBFile string `json:"db_file"`
	Pid    int    `json:"pid"`
	Log    string `json:"log"`
}

// Address is the frontend gRPC address clients dial.
func (t Temporal) Address() string { return "127.0.0.1:" + strconv.Itoa(t.Port) }

// UIURL is the web UI address.
func (t Temporal) UIURL() string { return "http://127.0.0.1:" + strconv.Itoa(t.UIPort) }

// Running reports whether the recorded process is alive and is a temporal
// server (a recycled pid is not ours).
func (t Temporal) Running() bool {
	if t.Pid <= 0 {
		return false
	}
	if syscall.Kill(t.Pid, 0) != nil {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", t.Pid))
	if err != nil {
		return false
	}
	return strings.Contains(string(cmdline), "start-dev")
}

// StartTemporal starts `temporal server start-dev` detached (its own session,
// so it outlives the caller), and waits until the frontend and the UI answer.
// DBFile empty keeps everything in memory.
func StartTemporal(ctx context.Context, t Temporal) (Temporal, *exec.Cmd, error) {
	bin, err := FindTemporal()
	if err != nil {
		return t, nil, err
	}
	if !PortFree(t.Port) || !PortFree(t.UIPort) {
		return t, nil, fmt.Errorf("start temporal: port %d or %d on 127.0.0.1 is taken: stop what uses it, or reshard dev destroy to pick new ports", t.Port, t.UIPort)
	}
	args := []string{"server", "start-dev",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(t.Port), "--ui-port", strconv.Itoa(t.UIPort),
		"--namespace", Namespace, "--log-level", "warn",
	}
	if t.DBFile != "" {
		args = append(args, "--db-filename", t.DBFile)
	}
	for _, sa := range SearchAttributes {
		args = append(args, "--search-attribute", sa)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if t.Log != "" {
		f, err := os.OpenFile(t.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return t, nil, err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return t, nil, fmt.Errorf("start temporal (%s): %w", bin, err)
	}
	t.Pid = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := waitTemporal(ctx, t, exited); err != nil {
		_ = syscall.Kill(-t.Pid, syscall.SIGKILL)
		return t, nil, fmt.Errorf("temporal dev server (log %s): %w", t.Log, err)
	}
	return t, cmd, nil
}

func waitTemporal(ctx context.Context, t Temporal, exited <-chan error) error {
	deadline := time.Now().Add(90 * time.Second)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("exited during start: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if WaitTCP(ctx, t.Address(), 10*time.Millisecond) == nil {
			resp, err := client.Get(t.UIURL())
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode < 500 && frontendHealthy(ctx, t) {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return errors.New("frontend or UI not answering, or the frontend not healthy, after 90s")
		}
	}
}

// frontendHealthy dials the frontend as a client does: its port answers a
// little before its health check passes, and a client dialled in between
// fails with "Frontend is not healthy yet".
func frontendHealthy(ctx context.Context, t Temporal) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := sdkclient.DialContext(ctx, sdkclient.Options{
		HostPort:  t.Address(),
		Namespace: Namespace,
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.CheckHealth(ctx, &sdkclient.CheckHealthRequest{})
	return err == nil
}

// StopTemporal ends the server's process group: SIGTERM, then SIGKILL.
func StopTemporal(t Temporal) error {
	if !t.Running() {
		return nil
	}
	// Once signalled, wait for the process itself to be gone: an exiting
	// process loses its cmdline before it dies, so Running turns false early.
	_ = syscall.Kill(-t.Pid, syscall.SIGTERM)
	for i := 0; i < 100; i++ {
		if exited(t.Pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-t.Pid, syscall.SIGKILL)
	for i := 0; i < 50; i++ {
		if exited(t.Pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("temporal dev server pid %d did not stop", t.Pid)
}

// exited reports whether pid is gone or a zombie (dead, not yet reaped: this
// machine's init may never reap it).
func exited(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}
