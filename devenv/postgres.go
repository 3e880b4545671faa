package devenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// InstallHint is the fix printed when PostgreSQL binaries are missing.
const InstallHint = "install PostgreSQL 15 server binaries (Debian: apt-get install -y postgresql) or put its bin directory (the one with initdb and pg_ctl) on PATH"

// ErrNoPostgres means no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; " + InstallHint)

// FindPGBin returns the directory holding initdb, pg_ctl and postgres: $PG_BIN,
// then PATH, then the newest /usr/lib/postgresql/*/bin.
func FindPGBin() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		if isExec(filepath.Join(d, "pg_ctl")) && isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
		return "", fmt.Errorf("PG_BIN=%s has no initdb and pg_ctl: %s", d, InstallHint)
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "pg_ctl")) && isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Server is one local PostgreSQL server.
type Server struct {
	Name    string `json:"name"`
	Port    int    `json:"port"`
	DataDir string `json:"data_dir"`
	// Password of the superuser "postgres" for TCP connections; empty means
	// trust authentication (throwaway test servers).
	Password Secret `json:"-"`
}

// Secret is a password: fmt and slog print it redacted, so a Server printed
// with %+v or logged whole does not leak it. Use string(s) where it is needed.
type Secret string

const redacted = "[redacted]"

// Format prints the secret redacted for every verb.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// LogValue keeps the secret out of slog output.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// DSN is the connection string of the server's database db, with the password
// when withPassword is set. Print only the form without it.
func (s Server) DSN(db string, withPassword bool) string {
	auth := "postgres"
	if withPassword && s.Password != "" {
		auth += ":" + urlEscape(string(s.Password))
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", auth, s.Port, db)
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// ServerOptions tune a server at initdb time.
type ServerOptions struct {
	// Fast turns off fsync and full_page_writes: for throwaway test servers only.
	Fast bool
	// ExtraConf lines are appended to postgresql.conf.
	ExtraConf []string
}

// PG runs PostgreSQL binaries, as the postgres OS user when we are root
// (PostgreSQL refuses to run as root).
type PG struct {
	Bin  string
	cred *syscall.Credential
	uid  int
	gid  int
}

// NewPG finds the binaries and the OS user to run them as.
func NewPG() (*PG, error) {
	bin, err := FindPGBin()
	if err != nil {
		return nil, err
	}
	pg := &PG{Bin: bin, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL must run as another user and the OS user postgres does not exist: create it (useradd -r postgres) or run reshard as a normal user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.uid, pg.gid = uid, gid
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return pg, nil
}

func (pg *PG) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, pg.tool(name), args...)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: pg.cred}
	c.Env = append(os.Environ(), "LC_ALL=C")
	return c
}

func (pg *PG) run(ctx context.Context, name string, args ...string) error {
	c := pg.cmd(ctx, name, args...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// tool is the path of a PostgreSQL program: in Bin, else beside the file
// Bin's pg_ctl links to (a PATH directory may link only initdb, pg_ctl and
// postgres, not pg_basebackup).
func (pg *PG) tool(name string) string {
	p := filepath.Join(pg.Bin, name)
	if isExec(p) {
		return p
	}
	if real, err := filepath.EvalSymlinks(filepath.Join(pg.Bin, "pg_ctl")); err == nil {
		if q := filepath.Join(filepath.Dir(real), name); isExec(q) {
			return q
		}
	}
	return p
}

// own makes path (and, when we are root, its parents' reachability) usable by
// the server's OS user.
func (pg *PG) own(path string) error {
	if pg.cred == nil {
		return nil
	}
	if err := os.Chown(path, pg.uid, pg.gid); err != nil {
		return err
	}
	// The postgres user must be able to traverse every parent directory.
	for d := filepath.Dir(path); d != "/" && d != "."; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("directory %s is not searchable by the postgres OS user that runs the servers: chmod o+x %s, or choose a state directory elsewhere (--state-dir)", d, d)
		}
	}
	return nil
}

// Init creates the server's data directory with initdb unless it exists.
func (pg *PG) Init(ctx context.Context, s Server, opts ServerOptions) error {
	if _, err := os.Stat(filepath.Join(s.DataDir, "PG_VERSION")); err == nil {
		return nil
	}
	// The parent holds the log and the initdb password file, which the
	// server's OS user must reach: 0755, not MkdirAll's inherited 0700.
	if err := os.MkdirAll(filepath.Dir(s.DataDir), 0o755); err != nil {
		return fmt.Errorf("create directory of %s: %w", s.Name, err)
	}
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory of %s: %w", s.Name, err)
	}
	if err := pg.own(s.DataDir); err != nil {
		return fmt.Errorf("data directory of %s: %w", s.Name, err)
	}
	args := []string{"-D", s.DataDir, "-U", "postgres", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-instructions"}
	if s.Password != "" {
		pw := filepath.Join(filepath.Dir(s.DataDir), "."+s.Name+".pw")
		if err := os.WriteFile(pw, []byte(string(s.Password)+"\n"), 0o600); err != nil {
			return err
		}
		defer os.Remove(pw)
		if err := pg.own(pw); err != nil {
			return err
		}
		args = append(args, "--auth-host=scram-sha-256", "--pwfile="+pw)
	} else {
		args = append(args, "--auth-host=trust")
	}
	if opts.Fast {
		args = append(args, "--no-sync")
	}
	if err := pg.run(ctx, "initdb", args...); err != nil {
		os.RemoveAll(s.DataDir)
		return fmt.Errorf("initdb for %s: %w", s.Name, err)
	}
	conf := []string{
		"",
		"# reshard devenv",
		"listen_addresses = '127.0.0.1'",
		"port = " + strconv.Itoa(s.Port),
		"unix_socket_directories = ''",
		"wal_level = logical",
		"max_replication_slots = 64",
		"max_wal_senders = 64",
		"max_connections = 300",
		"max_prepared_transactions = 16",
		"shared_buffers = 128MB",
		"max_wal_size = 2GB",
		"logical_decoding_work_mem = 64MB",
		"log_min_messages = warning",
		"log_line_prefix = '%m [%p] %q%a '",
	}
	if opts.Fast {
		conf = append(conf, "fsync = off", "full_page_writes = off", "synchronous_commit = off")
	}
	conf = append(conf, opts.ExtraConf...)
	f, err := os.OpenFile(filepath.Join(s.DataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(strings.Join(conf, "\n") + "\n")
	return err
}

// SetPort rewrites the port of an existing data directory (used when the
// recorded port was taken by someone else while the server was down).
func (pg *PG) SetPort(s Server) error {
	p := filepath.Join(s.DataDir, "postgresql.conf")
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return os.WriteFile(p, append(b, []byte("port = "+strconv.Itoa(s.Port)+"\n")...), 0o600)
}

// Running reports whether the server of dataDir is up.
func (pg *PG) Running(ctx context.Context, s Server) bool {
	if _, err := os.Stat(filepath.Join(s.DataDir, "postmaster.pid")); err != nil {
		return false
	}
	return pg.run(ctx, "pg_ctl", "status", "-D", s.DataDir) == nil
}

// Start starts the server unless it runs, and waits until it accepts
// connections. A crashed server (stale postmaster.pid) is started again.
func (pg *PG) Start(ctx context.Context, s Server) error {
	if pg.Running(ctx, s) {
		return nil
	}
	logf := filepath.Join(filepath.Dir(s.DataDir), s.Name+".log")
	if f, err := os.OpenFile(logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		f.Close()
		if err := pg.own(logf); err != nil {
			return err
		}
	}
	if !PortFree(s.Port) {
		return fmt.Errorf("start %s: port %d on 127.0.0.1 is taken by another process: stop it, or remove the cluster (reshard dev destroy) to pick new ports", s.Name, s.Port)
	}
	if err := pg.run(ctx, "pg_ctl", "start", "-w", "-t", "60", "-D", s.DataDir, "-l", logf); err != nil {
		return fmt.Errorf("start %s (log %s): %w", s.Name, logf, err)
	}
	return nil
}

// Stop stops the server (fast shutdown) if it runs.
func (pg *PG) Stop(ctx context.Context, s Server) error {
	if !pg.Running(ctx, s) {
		return nil
	}
	if err := pg.run(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-m", "fast", "-D", s.DataDir); err != nil {
		return fmt.Errorf("stop %s: %w", s.Name, err)
	}
	return nil
}

// Kill stops the server at once (immediate shutdown: a crash, for fault tests).
func (pg *PG) Kill(ctx context.Context, s Server) error {
	return pg.run(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", s.DataDir)
}

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePorts returns n distinct free ports.
func FreePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var ports []int
	for len(ports) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// PortFree reports whether nothing listens on 127.0.0.1:port.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// WaitTCP waits until addr accepts TCP connections.
func WaitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not accept connections within %s: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
