package devenv_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// requireBinaries skips outside CI and fails with CI=true when PostgreSQL or
// the temporal CLI is missing.
func requireBinaries(t *testing.T) {
	t.Helper()
	if _, err := devenv.NewPG(); err != nil {
		pgtest.Unavailable(t, err)
	}
	if _, err := devenv.FindTemporal(); err != nil {
		pgtest.Unavailable(t, err)
	}
}

// newStateDir is a state directory under /tmp (as root) with a relative
// spelling, to check that Up makes it absolute.
func newStateDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(pgtest.TempDir(t, "reshard-devenv-"), "state")
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) S ..." — the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// processesMentioning lists live processes whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(s)) || !alive(pid) {
			continue
		}
		out = append(out, fmt.Sprintf("%d: %s", pid, bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	return out
}

type snapshot struct {
	ports map[string]int
	pids  map[string]int
}

func snap(c *devenv.Cluster) snapshot {
	s := snapshot{ports: map[string]int{}, pids: map[string]int{}}
	for _, n := range c.Nodes {
		s.ports[n.Name], s.pids[n.Name] = n.Port, n.Pid
	}
	s.ports["temporal"], s.pids["temporal"] = c.Temporal.Port, c.Temporal.Pid
	s.ports["temporal-ui"] = c.Temporal.UIPort
	return s
}

func mustStatus(t *testing.T, ctx context.Context, dir string) *devenv.Status {
	t.Helper()
	st, err := devenv.GetStatus(ctx, dir)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

func requireHealthy(t *testing.T, st *devenv.Status, servers int) {
	t.Helper()
	if len(st.Nodes) != servers {
		t.Fatalf("status shows %d servers, want %d", len(st.Nodes), servers)
	}
	for _, n := range st.Nodes {
		if !n.Running || n.WalLevel != "logical" {
			t.Fatalf("server %s: running=%v wal_level=%q err=%v", n.Name, n.Running, n.WalLevel, n.Err)
		}
	}
	if !st.Temporal.Running || st.Temporal.UIStatus != 200 {
		t.Fatalf("temporal: running=%v ui status=%d err=%v", st.Temporal.Running, st.Temporal.UIStatus, st.Temporal.Err)
	}
	if !st.Healthy() {
		t.Fatal("Healthy() = false for a healthy cluster")
	}
}

// One cluster walks through the whole life cycle: starting servers is the
// expensive part, so the steps share it.
func TestClusterLifecycle(t *testing.T) {
	requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := newStateDir(t)
	t.Cleanup(func() {
		// Whatever failed above, leave no process behind.
		_ = devenv.Destroy(context.Background(), dir)
	})
	// A relative spelling of the same directory: Up must make it absolute.
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		rel = dir
	}

	c, err := devenv.Up(ctx, devenv.Options{StateDir: rel, Shards: 2, Fast: true})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if c.StateDir != dir {
		t.Fatalf("state dir %q, want absolute %q", c.StateDir, dir)
	}
	if got := strings.Join(c.Names(), ","); got != "control,shard1,shard2" {
		t.Fatalf("servers %s, want control,shard1,shard2", got)
	}
	st := mustStatus(t, ctx, dir)
	requireHealthy(t, st, 3)
	first := snap(c)

	t.Run("database reshard needs the password", func(t *testing.T) {
		for _, n := range c.Nodes {
			conn, err := pgx.Connect(ctx, n.DSN(devenv.Database, true))
			if err != nil {
				t.Fatalf("connect to %s/%s with the password: %v", n.Name, devenv.Database, err)
			}
			conn.Close(ctx)
			if conn, err := pgx.Connect(ctx, n.DSN(devenv.Database, false)); err == nil {
				conn.Close(ctx)
				t.Fatalf("%s accepts a TCP connection without password", n.Name)
			}
		}
	})

	t.Run("second up changes nothing", func(t *testing.T) {
		before, _ := os.ReadFile(filepath.Join(dir, devenv.ClusterFile))
		c2, err := devenv.Up(ctx, devenv.Options{StateDir: dir})
		if err != nil {
			t.Fatalf("second up: %v", err)
		}
		after, _ := os.ReadFile(filepath.Join(dir, devenv.ClusterFile))
		if fmt.Sprint(snap(c2)) != fmt.Sprint(first) {
			t.Fatalf("second up changed ports or pids:\nbefore %v\nafter  %v", first, snap(c2))
		}
		if !bytes.Equal(before, after) {
			t.Fatalf("second up rewrote %s:\n%s\n---\n%s", devenv.ClusterFile, before, after)
		}
	})

	t.Run("crashed server and Temporal are restarted", func(t *testing.T) {
		pg, err := devenv.NewPG()
		if err != nil {
			t.Fatal(err)
		}
		victim, _ := c.Node("shard1")
		if err := pg.Kill(ctx, victim.Server); err != nil {
			t.Fatalf("kill shard1: %v", err)
		}
		// And the Temporal dev server dies hard.
		if err := syscall.Kill(c.Temporal.Pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill temporal: %v", err)
		}
		for i := 0; alive(c.Temporal.Pid) && i < 50; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		st := mustStatus(t, ctx, dir)
		if st.Nodes[1].Running || st.Temporal.Running || st.Healthy() {
			t.Fatalf("status after kill: shard1 running=%v temporal running=%v healthy=%v", st.Nodes[1].Running, st.Temporal.Running, st.Healthy())
		}
		c3, err := devenv.Up(ctx, devenv.Options{StateDir: dir})
		if err != nil {
			t.Fatalf("up after crash: %v", err)
		}
		got := snap(c3)
		if got.ports["shard1"] != first.ports["shard1"] || got.pids["shard1"] == first.pids["shard1"] {
			t.Fatalf("shard1 after restart: port %d (was %d), pid %d (was %d)", got.ports["shard1"], first.ports["shard1"], got.pids["shard1"], first.pids["shard1"])
		}
		if got.ports["temporal"] != first.ports["temporal"] || got.pids["temporal"] == first.pids["temporal"] {
			t.Fatalf("temporal after restart: port %d (was %d), pid %d (was %d)", got.ports["temporal"], first.ports["temporal"], got.pids["temporal"], first.pids["temporal"])
		}
		for _, name := range []string{"control", "shard2"} {
			if got.pids[name] != first.pids[name] {
				t.Fatalf("%s was restarted although it ran: pid %d, was %d", name, got.pids[name], first.pids[name])
			}
		}
		requireHealthy(t, mustStatus(t, ctx, dir), 3)
		first = got
	})

	t.Run("growing adds shards, shrinking is refused", func(t *testing.T) {
		c4, err := devenv.Up(ctx, devenv.Options{StateDir: dir, Shards: 3, Fast: true})
		if err != nil {
			t.Fatalf("up --shards 3: %v", err)
		}
		got := snap(c4)
		for name, pid := range first.pids {
			if got.pids[name] != pid || got.ports[name] != first.ports[name] {
				t.Fatalf("%s changed when a shard was added", name)
			}
		}
		if _, ok := c4.Node("shard3"); !ok {
			t.Fatalf("no shard3 after up --shards 3: %v", c4.Names())
		}
		requireHealthy(t, mustStatus(t, ctx, dir), 4)
		if _, err := devenv.Up(ctx, devenv.Options{StateDir: dir, Shards: 2}); !errors.Is(err, devenv.ErrShrink) {
			t.Fatalf("up --shards 2 on 3 shards: err = %v, want ErrShrink", err)
		}
		c = c4
	})

	t.Run("state and config carry no password", func(t *testing.T) {
		pw, err := os.ReadFile(filepath.Join(dir, devenv.SecretFile))
		if err != nil {
			t.Fatal(err)
		}
		secret := strings.TrimSpace(string(pw))
		if len(secret) < 20 {
			t.Fatalf("password is %d characters", len(secret))
		}
		fi, _ := os.Stat(filepath.Join(dir, devenv.SecretFile))
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("secret mode %v, want 0600", fi.Mode().Perm())
		}
		js, _ := json.Marshal(c)
		for name, b := range map[string][]byte{
			devenv.ClusterFile: mustRead(t, filepath.Join(dir, devenv.ClusterFile)),
			devenv.ConfigFile:  mustRead(t, c.ConfigPath()),
			"Cluster as JSON":  js,
			"Status":           []byte(fmt.Sprintf("%+v", mustStatus(t, ctx, dir))),
		} {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s contains the password", name)
			}
		}
		wc, err := devenv.ReadWorkerConfig(c.ConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		if len(wc.Shards) != 3 || wc.Shards["shard3"] == "" || wc.Control == "" || wc.Temporal.Address != c.Temporal.Address() || wc.Temporal.Namespace != devenv.Namespace {
			t.Fatalf("worker config: %+v", wc)
		}
		// The worker's /metrics gets a free port of its own (main: every
		// dev cluster's worker took 127.0.0.1:9464, and a second cluster's
		// worker failed with "address already in use").
		if c.MetricsPort == 0 || wc.Worker.Listen != fmt.Sprintf("127.0.0.1:%d", c.MetricsPort) {
			t.Fatalf("worker.listen %q, metrics port %d", wc.Worker.Listen, c.MetricsPort)
		}
		if ln, err := net.Listen("tcp", wc.Worker.Listen); err != nil {
			t.Errorf("worker.listen %s is not free: %v", wc.Worker.Listen, err)
		} else {
			ln.Close()
		}
		t.Setenv(devenv.PasswordEnv, "")
		if got, err := wc.Password(); err != nil || got != secret {
			t.Fatalf("password from the config's password_file: err %v, matches %v", err, got == secret)
		}
		// The config's DSN plus its password reaches the shard.
		cfg, err := pgx.ParseConfig(wc.Shards["shard2"])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Password = secret
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("connect with the worker config: %v", err)
		}
		conn.Close(ctx)
	})

	t.Run("down stops every process, up brings them back", func(t *testing.T) {
		if err := devenv.Down(ctx, dir); err != nil {
			t.Fatalf("down: %v", err)
		}
		requireStopped(t, c, dir)
		st := mustStatus(t, ctx, dir)
		if st.Healthy() || st.Temporal.Running {
			t.Fatal("status after down says something runs")
		}
		// Temporal comes back on its database file (namespace and search
		// attributes already registered there).
		c5, err := devenv.Up(ctx, devenv.Options{StateDir: dir})
		if err != nil {
			t.Fatalf("up after down: %v", err)
		}
		for name, port := range first.ports {
			if snap(c5).ports[name] != port {
				t.Fatalf("%s port changed across down/up", name)
			}
		}
		requireHealthy(t, mustStatus(t, ctx, dir), 4)
		c = c5
	})

	t.Run("destroy removes everything", func(t *testing.T) {
		if err := devenv.Destroy(ctx, dir); err != nil {
			t.Fatalf("destroy: %v", err)
		}
		requireStopped(t, c, dir)
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("state dir still there after destroy: %v", err)
		}
		if _, err := devenv.Load(dir); !errors.Is(err, devenv.ErrNoCluster) {
			t.Fatalf("load after destroy: %v, want ErrNoCluster", err)
		}
	})
}

func requireStopped(t *testing.T, c *devenv.Cluster, dir string) {
	t.Helper()
	for _, n := range c.Nodes {
		if alive(n.Pid) {
			t.Fatalf("%s (pid %d) still runs", n.Name, n.Pid)
		}
		if !devenv.PortFree(n.Port) {
			t.Fatalf("port %d of %s still taken", n.Port, n.Name)
		}
	}
	if alive(c.Temporal.Pid) {
		t.Fatalf("temporal (pid %d) still runs", c.Temporal.Pid)
	}
	if !devenv.PortFree(c.Temporal.Port) || !devenv.PortFree(c.Temporal.UIPort) {
		t.Fatal("a temporal port is still taken")
	}
	if ps := processesMentioning(dir); len(ps) > 0 {
		t.Fatalf("processes still mention %s:\n%s", dir, strings.Join(ps, "\n"))
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStateDirUnreachableByPostgres: as root, a state directory below a
// directory the postgres OS user cannot traverse (a checkout under /root)
// still works: the servers live in the temporary directory, and destroy
// removes them there too.
func TestStateDirUnreachableByPostgres(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root runs the servers as another OS user")
	}
	requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	private := pgtest.TempDir(t, "reshard-devenv-")
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(private, "state")
	t.Cleanup(func() { _ = devenv.Destroy(context.Background(), dir) })
	c, err := devenv.Up(ctx, devenv.Options{StateDir: dir, Shards: 1, Fast: true})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if strings.HasPrefix(c.PGDir, private) {
		t.Fatalf("servers in %s, which the postgres user cannot reach", c.PGDir)
	}
	for _, n := range c.Nodes {
		if !strings.HasPrefix(n.DataDir, c.PGDir+"/") {
			t.Fatalf("%s data in %s, not under %s", n.Name, n.DataDir, c.PGDir)
		}
	}
	requireHealthy(t, mustStatus(t, ctx, dir), 2)
	if err := devenv.Destroy(ctx, dir); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	requireStopped(t, c, dir)
	if _, err := os.Stat(c.PGDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("server directory %s still there after destroy: %v", c.PGDir, err)
	}
}

func TestDestroyLeavesForeignDirectoryAlone(t *testing.T) {
	dir := pgtest.TempDir(t, "reshard-devenv-")
	if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := devenv.Destroy(context.Background(), dir); err == nil {
		t.Fatal("destroy removed a directory without cluster.json")
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Fatalf("destroy touched a foreign directory: %v", err)
	}
}

func TestDSNNeverCarriesPasswordUnlessAsked(t *testing.T) {
	s := devenv.Server{Name: "shard1", Port: 5432, Password: "s3cr/et@x"}
	if d := s.DSN("reshard", false); strings.Contains(d, "s3cr") {
		t.Fatalf("DSN without password: %s", d)
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("server", "server", s, "password", s.Password)
	for _, out := range []string{fmt.Sprintf("%v %+v %#v %s %q", s, s, s, s.Password, s.Password), logged.String()} {
		if strings.Contains(out, "s3cr") {
			t.Fatalf("printed server shows the password: %s", out)
		}
	}
	cfg, err := pgx.ParseConfig(s.DSN("reshard", true))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Password != string(s.Password) || cfg.Port != 5432 || cfg.Database != "reshard" {
		t.Fatalf("DSN with password parses to password ok=%v port %d db %s", cfg.Password == string(s.Password), cfg.Port, cfg.Database)
	}
}

// docker-compose.yml cannot be run here (no Docker engine); at least keep its
// Temporal search attributes and PostgreSQL settings in step with devenv.
func TestComposeFileMatchesDevenv(t *testing.T) {
	b, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image   string `yaml:"image"`
			Command any    `yaml:"command"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	tc := compose.Services["temporal"]
	args := fmt.Sprint(tc.Command)
	for _, sa := range devenv.SearchAttributes {
		if !strings.Contains(args, sa) {
			t.Errorf("temporal service lacks --search-attribute %s", sa)
		}
	}
	if !strings.Contains(args, "--namespace "+devenv.Namespace) || !strings.HasSuffix(tc.Image, ":"+strings.TrimPrefix(devenv.TemporalVersion, "v")) {
		t.Errorf("temporal service: image %s, command %s", tc.Image, args)
	}
	for _, name := range []string{"control", "shard1", "shard2", "shard3", "shard4", "shard5"} {
		s, ok := compose.Services[name]
		if !ok || !strings.HasPrefix(s.Image, "postgres:15.") || !strings.Contains(fmt.Sprint(s.Command), "wal_level=logical") {
			t.Errorf("service %s: %+v", name, s)
		}
	}
	// The worker's configuration names exactly the compose services, and
	// Prometheus scrapes the port the worker listens on.
	for _, name := range []string{"init", "worker", "prometheus", "grafana"} {
		if _, ok := compose.Services[name]; !ok {
			t.Errorf("no %s service", name)
		}
	}
	wc, err := devenv.ReadWorkerConfig("../deploy/reshard.yaml")
	if err != nil {
		t.Fatalf("deploy/reshard.yaml: %v", err)
	}
	for name, dsn := range wc.Shards {
		if _, ok := compose.Services[name]; !ok || !strings.Contains(dsn, "@"+name+":5432/") || strings.Contains(dsn, ":"+"${") {
			t.Errorf("deploy/reshard.yaml shard %s = %s: not the compose service", name, dsn)
		}
	}
	if len(wc.Shards) != 5 || !strings.Contains(wc.Control, "@control:5432/") || wc.Temporal.Address != "temporal:7233" || wc.Temporal.Namespace != devenv.Namespace {
		t.Errorf("deploy/reshard.yaml: %+v", wc)
	}
	worker := fmt.Sprint(compose.Services["worker"].Command)
	prom, err := os.ReadFile("../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(worker, "0.0.0.0:9464") || !strings.Contains(string(prom), `"worker:9464"`) {
		t.Errorf("worker listens on %s, Prometheus scrapes %s", worker, prom)
	}
}
