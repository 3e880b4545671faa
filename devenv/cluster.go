package devenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sync/errgroup"
)

// Files and names of a local cluster's state directory.
const (
	ClusterFile   = "cluster.json" // ports, pids, names; never the password
	SecretFile    = "secret"       // the superuser password, mode 0600
	ConfigFile    = "reshard.yaml" // the worker configuration written by Up
	DefaultShards = 4
	ControlName   = "control"
	// Database is created on every server, so nobody works in "postgres".
	Database = "reshard"
	// PasswordEnv, when set, overrides the password file for the worker.
	PasswordEnv = "RESHARD_DEV_PASSWORD"
)

// Server roles in a cluster.
const (
	RoleControl = "control"
	RoleShard   = "shard"
)

// ErrNoCluster means the state directory holds no cluster.
var ErrNoCluster = errors.New("no local cluster")

// ErrShrink means Up was asked for fewer shards than the cluster has.
var ErrShrink = errors.New("fewer shards than the cluster has")

// Options of Up.
type Options struct {
	// StateDir holds everything of the cluster; made absolute.
	StateDir string
	// Shards is the number of shard servers: 0 keeps the cluster's count
	// (DefaultShards for a new one); more adds shards; fewer is refused
	// (ErrShrink), since removing a shard would drop its data.
	Shards int
	// Fast turns off fsync on new servers: for tests only.
	Fast bool
	// Logger gets progress; nil discards it.
	Logger *slog.Logger
}

// Node is one PostgreSQL server of the cluster as recorded in cluster.json.
type Node struct {
	Server        // Name, Port, DataDir; the Password is never serialized
	Role   string `json:"role"`
	Log    string `json:"log"`
	Pid    int    `json:"pid"` // postmaster pid when last started by Up; 0 after Down
	// Standby is the shard's streaming standby (reshard dev standby), if any.
	Standby *Node `json:"standby,omitempty"`
	// Stale marks a failed-over primary kept as the standby-to-be: its data
	// is replaced by a fresh base backup before it starts again.
	Stale bool `json:"stale,omitempty"`
}

// ClientDSN is the DSN clients use for the node, without password: with a
// standby it lists both servers, this one first, and asks for the one that
// accepts writes (pgx and libpq try them in order), so that it still reaches
// the primary after a failover.
func (n Node) ClientDSN(db string) string {
	if n.Standby == nil {
		return n.DSN(db, false)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write", n.Port, n.Standby.Port, db)
}

// Cluster is a local cluster: a control server, shard1..shardN and a
// Temporal dev server, all under StateDir.
type Cluster struct {
	StateDir string `json:"state_dir"`
	// PGDir holds the servers' directories: StateDir/pg, unless we are root
	// and the postgres OS user cannot reach StateDir (see pgDirFor).
	PGDir    string   `json:"pg_dir,omitempty"`
	Nodes    []Node   `json:"servers"` // control first, then shard1..shardN
	Temporal Temporal `json:"temporal"`
	// MetricsPort is the loopback port of the worker's /metrics (written
	// to reshard.yaml as worker.listen): free when the cluster was made,
	// so that two dev clusters on one host do not collide on 9464.
	MetricsPort int `json:"metrics_port,omitempty"`
}

// pgDirFor is where the servers of the cluster in stateDir live. It is
// stateDir/pg, except when we are root and some directory on the way to
// stateDir is not searchable by other users (a checkout under /root, mode
// 0700): the servers run as the postgres OS user, which could not reach its
// data there, so they live in a directory of the system's temporary
// directory named after stateDir instead, removed by Destroy.
func pgDirFor(stateDir string) string {
	if os.Geteuid() != 0 || searchableByOthers(stateDir) {
		return filepath.Join(stateDir, "pg")
	}
	sum := sha256.Sum256([]byte(stateDir))
	return filepath.Join(os.TempDir(), "reshard-pg-"+hex.EncodeToString(sum[:6]))
}

// searchableByOthers reports whether dir and every directory above it can
// be traversed by any user.
func searchableByOthers(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == filepath.Dir(d) {
			return true
		}
	}
}

// makePGDir creates the cluster's PGDir. Outside the state directory it
// must be a real directory owned by us, not something another user of a
// shared temporary directory prepared.
func (c *Cluster) makePGDir() error {
	if err := os.MkdirAll(c.PGDir, 0o755); err != nil {
		return fmt.Errorf("create server directory %s: %w", c.PGDir, err)
	}
	st, err := os.Lstat(c.PGDir)
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.IsDir() || (ok && int(sys.Uid) != os.Geteuid()) {
		return fmt.Errorf("server directory %s is not a directory of ours: remove it, or choose another state directory (--state-dir)", c.PGDir)
	}
	return nil
}

// pgDirOutside reports whether PGDir lies outside the state directory.
func (c *Cluster) pgDirOutside() bool {
	rel, err := filepath.Rel(c.StateDir, c.PGDir)
	return c.PGDir != "" && (err != nil || strings.HasPrefix(rel, ".."))
}

// Node returns the server named name.
func (c *Cluster) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Names lists the servers' names in order.
func (c *Cluster) Names() []string {
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.Name)
	}
	return names
}

// Shards are the shard servers, shard1 first.
func (c *Cluster) Shards() []Node {
	var out []Node
	for _, n := range c.Nodes {
		if n.Role == RoleShard {
			out = append(out, n)
		}
	}
	return out
}

// ConfigPath is the worker configuration file Up writes.
func (c *Cluster) ConfigPath() string { return filepath.Join(c.StateDir, ConfigFile) }

// SecretPath is the file holding the superuser password.
func (c *Cluster) SecretPath() string { return filepath.Join(c.StateDir, SecretFile) }

// ShardName is the name of shard i (1-based).
func ShardName(i int) string { return "shard" + strconv.Itoa(i) }

// AbsStateDir makes a state directory absolute, so that cluster.json,
// reshard.yaml and the servers do not depend on the caller's directory.
func AbsStateDir(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("state directory is empty")
	}
	return filepath.Abs(dir)
}

// Load reads the cluster of stateDir with its password set on every server.
// It returns ErrNoCluster (wrapped) when there is none.
func Load(stateDir string) (*Cluster, error) {
	dir, err := AbsStateDir(stateDir)
	if err != nil {
		return nil, err
	}
	c, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("%w in %s: start one with reshard dev up", ErrNoCluster, dir)
	}
	pw, err := readSecret(c.SecretPath())
	if err != nil {
		return nil, err
	}
	c.setPassword(pw)
	return c, nil
}

// readState returns nil, nil when dir has no cluster.json.
func readState(dir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(dir, ClusterFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c Cluster
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, ClusterFile), err)
	}
	// The directory may have been moved; what is inside follows it.
	if c.StateDir != dir {
		return nil, fmt.Errorf("%s describes a cluster in %s, not %s: move it back, or reshard dev destroy there", filepath.Join(dir, ClusterFile), c.StateDir, dir)
	}
	return &c, nil
}

func (c *Cluster) setPassword(pw string) {
	for i := range c.Nodes {
		c.Nodes[i].Password = Secret(pw)
		if sb := c.Nodes[i].Standby; sb != nil {
			sb.Password = Secret(pw)
		}
	}
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(c.StateDir, ClusterFile), append(b, '\n'), 0o644)
}

// writeFileAtomic replaces path with data, and leaves an identical file
// untouched (a second Up changes nothing).
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the cluster password: %w (without it the servers cannot be reached: reshard dev destroy, then up)", err)
	}
	pw := strings.TrimSpace(string(b))
	if pw == "" {
		return "", fmt.Errorf("the password file %s is empty: reshard dev destroy, then up", path)
	}
	return pw, nil
}

// newSecret generates the password once; an existing file is kept.
func newSecret(path string) (string, error) {
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	pw := base64.RawURLEncoding.EncodeToString(buf)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(pw + "\n"); err != nil {
		f.Close()
		return "", err
	}
	return pw, f.Close()
}

// lock serializes Up, Down and Destroy on one state directory.
func lock(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another reshard dev command holds %s: %w", dir, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}

// Up starts the cluster of opts.StateDir, creating what is missing: it is
// idempotent (a second Up changes nothing), restarts servers that crashed and
// adds shards when opts.Shards grows. Ports are chosen once and kept.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	log := logger(opts.Logger)
	if opts.Shards < 0 {
		return nil, fmt.Errorf("shards = %d: need at least 1", opts.Shards)
	}
	dir, err := AbsStateDir(opts.StateDir)
	if err != nil {
		return nil, err
	}
	pg, err := NewPG()
	if err != nil {
		return nil, err
	}
	if _, err := FindTemporal(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	unlock, err := lock(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	c, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if c == nil {
		c = &Cluster{StateDir: dir}
	}
	pw, err := clusterSecret(c)
	if err != nil {
		return nil, err
	}
	if c.PGDir == "" {
		c.PGDir = pgDirFor(dir)
	}
	if err := c.makePGDir(); err != nil {
		return nil, err
	}
	if err := c.plan(opts.Shards); err != nil {
		return nil, err
	}
	// Record the ports before starting anything, so that a failed Up is
	// retried on the same ports.
	if err := c.save(); err != nil {
		return nil, err
	}
	c.setPassword(pw)

	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	// Temporal first: it takes longest to answer.
	g.Go(func() error {
		t, err := upTemporal(gctx, c.Temporal, log)
		if err != nil {
			return err
		}
		mu.Lock()
		c.Temporal = t
		mu.Unlock()
		return nil
	})
	for i := range c.Nodes {
		n := c.Nodes[i]
		g.Go(func() error {
			pid, err := upNode(gctx, pg, n, opts.Fast, log)
			if err != nil {
				return err
			}
			mu.Lock()
			c.Nodes[i].Pid = pid
			mu.Unlock()
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		err = c.upStandbys(ctx, pg, log)
	}
	// Pids of what did start are worth keeping even when something failed.
	if serr := c.save(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if err := c.writeConfig(); err != nil {
		return nil, err
	}
	return c, nil
}

// clusterSecret reads the password, or generates it for a cluster that has
// no server yet.
func clusterSecret(c *Cluster) (string, error) {
	_, err := os.Stat(c.SecretPath())
	if err == nil {
		return readSecret(c.SecretPath())
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	for _, n := range c.Nodes {
		if _, err := os.Stat(n.DataDir); err == nil {
			return "", fmt.Errorf("%s is missing but server %s exists with a password set from it: reshard dev destroy, then up", c.SecretPath(), n.Name)
		}
	}
	return newSecret(c.SecretPath())
}

// plan adds the servers that are missing and gives them free ports.
func (c *Cluster) plan(shards int) error {
	have := len(c.Shards())
	want := shards
	if want == 0 {
		want = have
		if want == 0 {
			want = DefaultShards
		}
	}
	if want < have {
		return fmt.Errorf("%w: asked for %d, %s has %d (reshard dev destroy, then up --shards %d, to start smaller)", ErrShrink, want, c.StateDir, have, want)
	}
	used := map[int]bool{}
	for _, n := range c.Nodes {
		used[n.Port] = true
	}
	used[c.Temporal.Port], used[c.Temporal.UIPort], used[c.MetricsPort] = true, true, true
	port := func() (int, error) {
		for range 100 {
			p, err := FreePort()
			if err != nil {
				return 0, err
			}
			if !used[p] {
				used[p] = true
				return p, nil
			}
		}
		return 0, errors.New("no free port found")
	}
	add := func(name, role string) error {
		p, err := port()
		if err != nil {
			return err
		}
		base := filepath.Join(c.PGDir, name)
		c.Nodes = append(c.Nodes, Node{
			Server: Server{Name: name, Port: p, DataDir: filepath.Join(base, "data")},
			Role:   role,
			Log:    filepath.Join(base, name+".log"),
		})
		return nil
	}
	if _, ok := c.Node(ControlName); !ok {
		if err := add(ControlName, RoleControl); err != nil {
			return err
		}
	}
	for i := have + 1; i <= want; i++ {
		if err := add(ShardName(i), RoleShard); err != nil {
			return err
		}
	}
	if c.Temporal.Port == 0 {
		var err error
		if c.Temporal.Port, err = port(); err != nil {
			return err
		}
		if c.Temporal.UIPort, err = port(); err != nil {
			return err
		}
		c.Temporal.DBFile = filepath.Join(c.StateDir, "temporal.db")
		c.Temporal.Log = filepath.Join(c.StateDir, "temporal.log")
	}
	if c.MetricsPort == 0 {
		var err error
		if c.MetricsPort, err = port(); err != nil {
			return err
		}
	}
	return nil
}

// upNode initializes and starts one server and creates its database; it
// returns the postmaster's pid.
func upNode(ctx context.Context, pg *PG, n Node, fast bool, log *slog.Logger) (int, error) {
	if !pg.Running(ctx, n.Server) {
		log.Info("starting server", "shard", n.Name, "port", n.Port, "data_dir", n.DataDir)
		if err := pg.Init(ctx, n.Server, ServerOptions{Fast: fast}); err != nil {
			return 0, err
		}
		if err := pg.Start(ctx, n.Server); err != nil {
			return 0, err
		}
	}
	if err := createDatabase(ctx, n.Server); err != nil {
		return 0, err
	}
	return postmasterPid(n.DataDir)
}

func createDatabase(ctx context.Context, s Server) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN("postgres", true))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", s.Name, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", Database).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s on %s: %w", Database, s.Name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s on %s: %w", Database, s.Name, err)
	}
	return nil
}

// postmasterPid reads the first line of postmaster.pid.
func postmasterPid(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// temporalOurs tells a running dev server of this cluster from a recycled pid.
func temporalOurs(t Temporal) bool {
	if !t.Running() {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", t.Pid))
	return err == nil && bytes.Contains(cmdline, []byte(t.DBFile))
}

func upTemporal(ctx context.Context, t Temporal, log *slog.Logger) (Temporal, error) {
	if temporalOurs(t) {
		return t, nil
	}
	log.Info("starting temporal dev server", "address", t.Address(), "ui", t.UIURL())
	// The process is detached (own session) and outlives us; the goroutine
	// StartTemporal leaves waiting on it ends with this process. The dev
	// server binds a few more ports of its own choosing, each picked free
	// and then bound, so a start that lost one of them to another process is
	// tried once more (on our recorded ports, with new ones of its own).
	started, _, err := StartTemporal(ctx, t)
	if err != nil && ctx.Err() == nil && PortFree(t.Port) && PortFree(t.UIPort) {
		log.Warn("temporal dev server did not start; trying once more", "error", err)
		started, _, err = StartTemporal(ctx, t)
	}
	if err != nil {
		return t, err
	}
	return started, nil
}

// WorkerConfig is the format of reshard.yaml, the worker configuration that
// Up writes. DSNs carry no password: it comes from the environment variable
// PasswordEnv when that is set, otherwise from PasswordFile.
type WorkerConfig struct {
	Control string `yaml:"control"`
	// Shards maps a shard's name to its DSN. An entry may instead be a
	// mapping {dsn: DSN, standby: DSN}, the second a streaming standby of
	// the shard's primary that a migration may read its copy and verify
	// from (--read-from standby); its standby goes to Standbys.
	Shards map[string]string `yaml:"shards"`
	// Standbys maps a shard's name to its standby's DSN (from the shards
	// entries written as mappings).
	Standbys     map[string]string `yaml:"-"`
	PasswordEnv  string            `yaml:"password_env"`
	PasswordFile string            `yaml:"password_file"`
	Temporal     TemporalConfig    `yaml:"temporal"`
	Worker       WorkerSection     `yaml:"worker,omitempty"`
	// Capacity is what each shard can spare for a migration (optional):
	// plan refuses what would overflow it.
	Capacity map[string]ShardCapacity `yaml:"capacity,omitempty"`
}

// ShardEntry is the long form of a shard's entry under shards.
type ShardEntry struct {
	DSN     string `yaml:"dsn"`
	Standby string `yaml:"standby,omitempty"`
}

// UnmarshalYAML reads a shard entry as a DSN or as a ShardEntry.
func (wc *WorkerConfig) UnmarshalYAML(value *yaml.Node) error {
	type plain WorkerConfig
	// Everything but shards decodes as it is; shards' entries one by one.
	rest := *value
	rest.Content = nil
	var shards *yaml.Node
	for i := 0; i+1 < len(value.Content); i += 2 {
		if value.Content[i].Value == "shards" {
			shards = value.Content[i+1]
			continue
		}
		rest.Content = append(rest.Content, value.Content[i], value.Content[i+1])
	}
	if err := rest.Decode((*plain)(wc)); err != nil {
		return err
	}
	if shards == nil {
		return nil
	}
	var entries map[string]yaml.Node
	if err := shards.Decode(&entries); err != nil {
		return err
	}
	wc.Shards = make(map[string]string, len(entries))
	for name, n := range entries {
		if n.Kind == yaml.ScalarNode {
			wc.Shards[name] = n.Value
			continue
		}
		var e ShardEntry
		if err := n.Decode(&e); err != nil {
			return fmt.Errorf("shards.%s: want a DSN, or dsn: and standby: (line %d): %w", name, n.Line, err)
		}
		wc.Shards[name] = e.DSN
		if e.Standby != "" {
			if wc.Standbys == nil {
				wc.Standbys = map[string]string{}
			}
			wc.Standbys[name] = e.Standby
		}
	}
	return nil
}

// MarshalYAML writes a shard that has a standby in the long form.
func (wc WorkerConfig) MarshalYAML() (any, error) {
	type plain WorkerConfig
	if len(wc.Standbys) == 0 {
		return plain(wc), nil
	}
	var n yaml.Node
	if err := n.Encode(plain(wc)); err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "shards" {
			continue
		}
		entries := n.Content[i+1].Content
		for j := 0; j+1 < len(entries); j += 2 {
			name := entries[j].Value
			if sb := wc.Standbys[name]; sb != "" {
				var e yaml.Node
				if err := e.Encode(ShardEntry{DSN: wc.Shards[name], Standby: sb}); err != nil {
					return nil, err
				}
				entries[j+1] = &e
			}
		}
	}
	return &n, nil
}

// WorkerSection holds the worker's own settings.
type WorkerSection struct {
	// Listen is the address of the worker's /metrics and health endpoint
	// when --listen is not given (default 127.0.0.1:9464).
	Listen string `yaml:"listen,omitempty"`
}

// ShardCapacity is one shard's entry under capacity in reshard.yaml.
type ShardCapacity struct {
	// DiskBytes is the free space the shard has for a move's rows and
	// indexes when it is a target.
	DiskBytes int64 `yaml:"disk_bytes,omitempty"`
	// WALBudgetBytes is the WAL a move's slot may retain on the shard when
	// it is a source (with max_slot_wal_keep_size, the lower of the two).
	WALBudgetBytes int64 `yaml:"wal_budget_bytes,omitempty"`
}

// TemporalConfig says where the worker finds Temporal.
type TemporalConfig struct {
	Address   string `yaml:"address"`
	Namespace string `yaml:"namespace"`
	UI        string `yaml:"ui"`
}

const configHeader = `# reshard worker configuration, written by "reshard dev up" on every run
# (edit a copy, not this file).
#
#   control:        DSN of the control database (topology), without password
#   shards:         shard name -> DSN, without password
#   password_env:   environment variable holding the password of every DSN;
#                   when it is set it wins over password_file
#   password_file:  file holding that password (mode 0600)
#   temporal:       address (host:port of the frontend), namespace, ui (URL)
#   worker.listen:  address of the worker's /metrics and health endpoint
#                   (a free port of this host, chosen by dev up)
#   capacity:       optional, per shard: disk_bytes (free space for what a
#                   move brings it), wal_budget_bytes (WAL a move's slot may
#                   retain on it); plan refuses what would overflow them
`

// WorkerConfig is the configuration a worker needs to use this cluster.
func (c *Cluster) WorkerConfig() WorkerConfig {
	wc := WorkerConfig{
		Shards:       map[string]string{},
		PasswordEnv:  PasswordEnv,
		PasswordFile: c.SecretPath(),
		Temporal:     TemporalConfig{Address: c.Temporal.Address(), Namespace: Namespace, UI: c.Temporal.UIURL()},
	}
	if c.MetricsPort != 0 {
		wc.Worker.Listen = fmt.Sprintf("127.0.0.1:%d", c.MetricsPort)
	}
	for _, n := range c.Nodes {
		switch n.Role {
		case RoleControl:
			wc.Control = n.DSN(Database, false)
		case RoleShard:
			wc.Shards[n.Name] = n.ClientDSN(Database)
		}
	}
	return wc
}

func (c *Cluster) writeConfig() error {
	b, err := yaml.Marshal(c.WorkerConfig())
	if err != nil {
		return err
	}
	return writeFileAtomic(c.ConfigPath(), append([]byte(configHeader), b...), 0o644)
}

// ReadWorkerConfig reads a file written by Up.
func ReadWorkerConfig(path string) (WorkerConfig, error) {
	var wc WorkerConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return wc, err
	}
	if err := yaml.Unmarshal(b, &wc); err != nil {
		return wc, fmt.Errorf("read %s: %w", path, err)
	}
	return wc, nil
}

// Password resolves the password of the configuration's DSNs.
func (wc WorkerConfig) Password() (string, error) {
	if wc.PasswordEnv != "" {
		if pw := os.Getenv(wc.PasswordEnv); pw != "" {
			return pw, nil
		}
	}
	if wc.PasswordFile == "" {
		return "", errors.New("no password: neither password_env is set nor password_file given")
	}
	return readSecret(wc.PasswordFile)
}

// NodeStatus is what Status found about one server.
type NodeStatus struct {
	Node
	Running  bool
	WalLevel string // read over a connection; empty when it failed
	Err      error  // why the server is not answering, if it is not
}

// TemporalStatus is what Status found about the Temporal dev server.
type TemporalStatus struct {
	Temporal
	Running  bool
	UIStatus int // HTTP status of the UI; 0 when it did not answer
	Err      error
}

// Status of a cluster.
type Status struct {
	Cluster  *Cluster
	Nodes    []NodeStatus
	Temporal TemporalStatus
}

// Healthy reports whether every server runs with wal_level=logical and
// Temporal's UI answers.
func (st *Status) Healthy() bool {
	for _, n := range st.Nodes {
		if !n.Running || n.WalLevel != "logical" {
			return false
		}
	}
	return st.Temporal.Running && st.Temporal.UIStatus == http.StatusOK
}

// GetStatus looks at every server of the cluster in stateDir: process,
// wal_level read over a connection, Temporal's UI over HTTP.
func GetStatus(ctx context.Context, stateDir string) (*Status, error) {
	c, err := Load(stateDir)
	if err != nil {
		return nil, err
	}
	pg, err := NewPG()
	if err != nil {
		return nil, err
	}
	st := &Status{Cluster: c, Nodes: make([]NodeStatus, len(c.Nodes))}
	var g errgroup.Group
	g.SetLimit(4)
	for i, n := range c.Nodes {
		g.Go(func() error {
			ns := NodeStatus{Node: n, Running: pg.Running(ctx, n.Server)}
			if ns.Running {
				if pid, err := postmasterPid(n.DataDir); err == nil {
					ns.Pid = pid
				}
				ns.WalLevel, ns.Err = walLevel(ctx, n.Server)
			} else {
				ns.Pid = 0
			}
			st.Nodes[i] = ns
			return nil
		})
	}
	_ = g.Wait()
	st.Temporal = TemporalStatus{Temporal: c.Temporal, Running: temporalOurs(c.Temporal)}
	if st.Temporal.Running {
		hc := &http.Client{Timeout: 5 * time.Second}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Temporal.UIURL(), nil)
		resp, err := hc.Do(req)
		if err != nil {
			st.Temporal.Err = err
		} else {
			resp.Body.Close()
			st.Temporal.UIStatus = resp.StatusCode
		}
	}
	return st, nil
}

func walLevel(ctx context.Context, s Server) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN(Database, true))
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", s.Name, err)
	}
	defer conn.Close(ctx)
	var lvl string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&lvl); err != nil {
		return "", fmt.Errorf("read wal_level of %s: %w", s.Name, err)
	}
	return lvl, nil
}

// Down stops every process Up started: each server with pg_ctl stop (fast),
// then the Temporal dev server. Data and ports are kept for the next Up.
func Down(ctx context.Context, stateDir string) error {
	dir, err := AbsStateDir(stateDir)
	if err != nil {
		return err
	}
	c, err := readState(dir)
	if err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("%w in %s", ErrNoCluster, dir)
	}
	unlock, err := lock(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	return c.down(ctx)
}

func (c *Cluster) down(ctx context.Context) error {
	var errs []error
	if len(c.Nodes) > 0 {
		pg, err := NewPG()
		if err != nil {
			return err
		}
		var g errgroup.Group
		g.SetLimit(4)
		stopErrs := make([]error, len(c.Nodes))
		for i, n := range c.Nodes {
			g.Go(func() error {
				// The standby first: stopping a primary waits for its
				// walsenders, and a synchronous standby gone first makes
				// no write wait (nothing writes while we stop).
				if n.Standby != nil {
					if err := pg.Stop(ctx, n.Standby.Server); err != nil {
						stopErrs[i] = err
						return nil
					}
					c.Nodes[i].Standby.Pid = 0
				}
				stopErrs[i] = pg.Stop(ctx, n.Server)
				if stopErrs[i] == nil {
					c.Nodes[i].Pid = 0
				}
				return nil
			})
		}
		_ = g.Wait()
		errs = append(errs, stopErrs...)
	}
	if temporalOurs(c.Temporal) {
		if err := StopTemporal(c.Temporal); err != nil {
			errs = append(errs, err)
		} else {
			c.Temporal.Pid = 0
		}
	} else {
		c.Temporal.Pid = 0
	}
	errs = append(errs, c.save())
	return errors.Join(errs...)
}

// Destroy stops the cluster and removes its state directory. A directory
// that is not a cluster's (no cluster.json, not empty) is left alone.
func Destroy(ctx context.Context, stateDir string) error {
	dir, err := AbsStateDir(stateDir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	c, err := readState(dir)
	if err != nil {
		return err
	}
	if c == nil {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() != ".lock" && e.Name() != SecretFile {
				return fmt.Errorf("%s has no %s: not a reshard dev state directory, not removing it", dir, ClusterFile)
			}
		}
		return os.RemoveAll(dir)
	}
	unlock, err := lock(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.down(ctx); err != nil {
		return fmt.Errorf("stop the cluster before removing it: %w", err)
	}
	if c.pgDirOutside() {
		if err := os.RemoveAll(c.PGDir); err != nil {
			return err
		}
	}
	return os.RemoveAll(dir)
}
