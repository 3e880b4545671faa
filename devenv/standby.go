package devenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyAppName is the application_name a shard's standby streams under, and
// so the one name in its primary's synchronous_standby_names.
const StandbyAppName = "reshard_standby"

// ErrNoShard means the cluster has no shard of that name.
var ErrNoShard = errors.New("no such shard")

// ErrNoStandby means the shard has no standby to fail over to.
var ErrNoStandby = errors.New("no standby")

// AddStandby gives a shard a synchronous streaming standby: a
// pg_basebackup -R of the primary on a port of its own, started and
// streaming, then named in the primary's synchronous_standby_names (with
// synchronous_commit on), so that a write the primary acknowledged is on the
// standby too. reshard.yaml then lists both servers for the shard with
// target_session_attrs=read-write, so every client follows the primary.
// It is idempotent: a shard that has a standby gets it started if it is down.
func AddStandby(ctx context.Context, stateDir, shard string, log *slog.Logger) (*Cluster, error) {
	log = logger(log)
	c, pg, unlock, err := openLocked(ctx, stateDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	i, err := c.shardIndex(shard)
	if err != nil {
		return nil, err
	}
	n := &c.Nodes[i]
	if !pg.Running(ctx, n.Server) {
		return nil, fmt.Errorf("primary of %s is not running: reshard dev up first", shard)
	}
	if n.Standby == nil {
		used := map[int]bool{c.Temporal.Port: true, c.Temporal.UIPort: true}
		for _, o := range c.Nodes {
			used[o.Port] = true
			if o.Standby != nil {
				used[o.Standby.Port] = true
			}
		}
		port, err := freePortExcept(used)
		if err != nil {
			return nil, err
		}
		sb := c.standbyNode(*n, port)
		n.Standby = &sb
		// Recorded before the copy starts, so that a failed attempt is
		// retried on the same port and directory.
		if err := c.save(); err != nil {
			return nil, err
		}
	}
	if err := c.startStandby(ctx, pg, n, log); err != nil {
		return nil, err
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	return c, c.writeConfig()
}

// FailoverOptions of Failover.
type FailoverOptions struct {
	// Switchover stops the primary cleanly (pg_ctl stop -m fast: it sends
	// the standby everything before it exits) before the promotion; without
	// it the primary is killed (immediate shutdown), as in a crash.
	Switchover bool
	// NoRebuild leaves the old primary stopped; otherwise its data is
	// replaced by a fresh pg_basebackup of the new primary and it runs as
	// the new standby.
	NoRebuild bool
	Logger    *slog.Logger
}

// FailoverResult says what a failover did.
type FailoverResult struct {
	Shard          string
	OldPort        int // the old primary's port, now the standby's (or down)
	NewPort        int // the promoted server's port
	Timeline       int // the new primary's timeline
	PromoteTook    time.Duration
	StandbyRebuilt bool
}

// Failover promotes the standby of shard: the old primary is stopped
// (killed, or cleanly stopped with Switchover), the standby promoted, and
// the old primary rebuilt as the new standby unless NoRebuild. The shard's
// DSN in reshard.yaml lists both servers, new primary first; a client with
// target_session_attrs=read-write finds the primary whichever it is.
func Failover(ctx context.Context, stateDir, shard string, opts FailoverOptions) (*FailoverResult, error) {
	log := logger(opts.Logger)
	c, pg, unlock, err := openLocked(ctx, stateDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	i, err := c.shardIndex(shard)
	if err != nil {
		return nil, err
	}
	n := &c.Nodes[i]
	if n.Standby == nil {
		return nil, fmt.Errorf("%s has %w to fail over to: give it one with reshard dev standby %s", shard, ErrNoStandby, shard)
	}
	if !pg.Running(ctx, n.Standby.Server) {
		return nil, fmt.Errorf("the standby of %s is not running: reshard dev standby %s starts it", shard, shard)
	}
	res := &FailoverResult{Shard: shard, OldPort: n.Port, NewPort: n.Standby.Port}
	start := time.Now()
	if err := pg.stopAndPromote(ctx, shard, n.Server, n.Standby.Server, opts.Switchover, log); err != nil {
		return nil, err
	}
	// Swap the records: the promoted server is the shard's primary now, and
	// the old primary's data is stale (it may hold WAL the new timeline does
	// not): it must never start again as it is, only from a fresh copy.
	stale := *n
	stale.Standby, stale.Role, stale.Pid, stale.Stale = nil, RoleStandby, 0, true
	promoted := *n.Standby
	promoted.Role, promoted.Standby = n.Role, &stale
	*n = promoted
	// With no standby streaming, a synchronous commit would wait forever.
	if err := setSyncStandby(ctx, n.Server, false); err != nil {
		return nil, err
	}
	res.PromoteTook = time.Since(start)
	tl, err := timeline(ctx, n.Server, Database)
	if err != nil {
		return nil, err
	}
	res.Timeline = tl
	if pid, err := postmasterPid(n.DataDir); err == nil {
		n.Pid = pid
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	if err := c.writeConfig(); err != nil {
		return nil, err
	}
	if opts.NoRebuild {
		return res, nil
	}
	log.Info("rebuilding the old primary as the standby", "shard", shard, "port", n.Standby.Port)
	if err := c.startStandby(ctx, pg, n, log); err != nil {
		return nil, err
	}
	res.StandbyRebuilt = true
	if err := c.save(); err != nil {
		return nil, err
	}
	return res, c.writeConfig()
}

// stopAndPromote stops the primary (cleanly with switchover, else killed,
// as in a crash) and promotes its standby.
func (pg *PG) stopAndPromote(ctx context.Context, shard string, primary, standby Server, switchover bool, log *slog.Logger) error {
	if switchover {
		log.Info("stopping primary (fast)", "shard", shard, "port", primary.Port)
		if err := pg.Stop(ctx, primary); err != nil {
			return err
		}
	} else if pg.Running(ctx, primary) {
		log.Info("killing primary (immediate)", "shard", shard, "port", primary.Port)
		if err := pg.Kill(ctx, primary); err != nil {
			return fmt.Errorf("kill primary of %s: %w", shard, err)
		}
	}
	log.Info("promoting standby", "shard", shard, "port", standby.Port)
	if err := pg.Promote(ctx, standby); err != nil {
		return fmt.Errorf("standby of %s: %w", shard, err)
	}
	return nil
}

// FailOverServers is Failover for a primary and its synchronous standby
// (StartStandby) that no cluster records, as tests make them: the same
// stop or kill, promotion and clearing of synchronous_standby_names, with
// no rebuild of the old primary. It returns the new primary's timeline and
// how long the shard had no primary (from the stop to the promotion's end).
func (pg *PG) FailOverServers(ctx context.Context, primary, standby Server, switchover bool) (timeline_ int, took time.Duration, err error) {
	start := time.Now()
	if err := pg.stopAndPromote(ctx, primary.Name, primary, standby, switchover, logger(nil)); err != nil {
		return 0, 0, err
	}
	took = time.Since(start)
	if err := setSyncStandby(ctx, standby, false); err != nil {
		return 0, took, err
	}
	tl, err := timeline(ctx, standby, "postgres") // exists on every server
	return tl, took, err
}

// RoleStandby is the role of a shard's standby.
const RoleStandby = "standby"

func openLocked(ctx context.Context, stateDir string) (*Cluster, *PG, func(), error) {
	c, err := Load(stateDir)
	if err != nil {
		return nil, nil, nil, err
	}
	pg, err := NewPG()
	if err != nil {
		return nil, nil, nil, err
	}
	unlock, err := lock(ctx, c.StateDir)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, pg, unlock, nil
}

func (c *Cluster) shardIndex(shard string) (int, error) {
	for i, n := range c.Nodes {
		if n.Name == shard && n.Role == RoleShard {
			return i, nil
		}
	}
	var names []string
	for _, n := range c.Shards() {
		names = append(names, n.Name)
	}
	return 0, fmt.Errorf("%w %q in the cluster of %s: use one of %v", ErrNoShard, shard, c.StateDir, names)
}

// standbyNode is where the standby of n lives: a directory of its own beside
// the primary's, the same name (its log is shardN.log there).
func (c *Cluster) standbyNode(n Node, port int) Node {
	base := filepath.Join(c.PGDir, n.Name+"-b")
	if filepath.Dir(n.DataDir) == base {
		base = filepath.Join(c.PGDir, n.Name)
	}
	return Node{
		Server: Server{Name: n.Name, Port: port, DataDir: filepath.Join(base, "data"), Password: n.Password},
		Role:   RoleStandby,
		Log:    filepath.Join(base, n.Name+".log"),
	}
}

// startStandby makes n.Standby a streaming synchronous standby of n,
// replacing the data of a stale one first.
func (c *Cluster) startStandby(ctx context.Context, pg *PG, n *Node, log *slog.Logger) error {
	sb := n.Standby
	sb.Password = n.Password
	if sb.Stale {
		if err := os.RemoveAll(sb.DataDir); err != nil {
			return fmt.Errorf("remove the old primary's data of %s: %w", n.Name, err)
		}
		sb.Stale = false
	}
	log.Info("starting the standby", "shard", n.Name, "port", sb.Port, "data_dir", sb.DataDir)
	if err := pg.StartStandby(ctx, n.Server, sb.Server); err != nil {
		return fmt.Errorf("standby of %s (log %s): %w", n.Name, sb.Log, err)
	}
	if pid, err := postmasterPid(sb.DataDir); err == nil {
		sb.Pid = pid
	}
	return nil
}

// StartStandby makes sb a streaming synchronous standby of primary: a base
// backup when sb has no data, started, streaming, then named in the
// primary's synchronous_standby_names. sb must have a port of its own.
func (pg *PG) StartStandby(ctx context.Context, primary, sb Server) error {
	if _, err := os.Stat(filepath.Join(sb.DataDir, "PG_VERSION")); err != nil {
		if err := pg.baseBackup(ctx, primary, sb); err != nil {
			return err
		}
	}
	if err := pg.Start(ctx, sb); err != nil {
		return err
	}
	if err := waitStreaming(ctx, primary, 60*time.Second); err != nil {
		return err
	}
	return setSyncStandby(ctx, primary, true)
}

// StartAsyncStandby is StartStandby without making the standby
// synchronous: the primary's commits never wait for it (a test's standby
// of a server other tests use, a read replica).
func (pg *PG) StartAsyncStandby(ctx context.Context, primary, sb Server) error {
	if _, err := os.Stat(filepath.Join(sb.DataDir, "PG_VERSION")); err != nil {
		// Its copy is thrown away with it: no fsync of every file.
		if err := pg.baseBackup(ctx, primary, sb, "--no-sync"); err != nil {
			return err
		}
	}
	if err := pg.Start(ctx, sb); err != nil {
		return err
	}
	return waitStreaming(ctx, primary, 60*time.Second)
}

// Promote ends the recovery of standby s: it becomes a primary on the next
// timeline. Clear synchronous_standby_names on it (a synchronous commit
// would wait for a standby it does not have) with ClearSyncStandby.
func (pg *PG) Promote(ctx context.Context, s Server) error {
	if err := pg.run(ctx, "pg_ctl", "promote", "-w", "-t", "60", "-D", s.DataDir); err != nil {
		return fmt.Errorf("promote %s: %w", s.Name, err)
	}
	return nil
}

// ClearSyncStandby empties the server's synchronous_standby_names.
func ClearSyncStandby(ctx context.Context, s Server) error { return setSyncStandby(ctx, s, false) }

// baseBackup copies primary into the standby's empty data directory with
// pg_basebackup -R (standby.signal and primary_conninfo written), streaming
// as StandbyAppName, and gives the copy its own port.
func (pg *PG) baseBackup(ctx context.Context, primary, sb Server, extra ...string) error {
	parent := filepath.Dir(sb.DataDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create directory of %s's standby: %w", primary.Name, err)
	}
	if err := pg.own(parent); err != nil {
		return err
	}
	conn := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, StandbyAppName)
	cmd := pg.cmd(ctx, "pg_basebackup", append([]string{"-D", sb.DataDir, "-d", conn, "-R", "-X", "stream", "-c", "fast"}, extra...)...)
	if primary.Password != "" {
		// From the environment, not the command line, which ps shows; -R
		// writes it into the copy's postgresql.auto.conf (mode 0600, the
		// server user's) as primary_conninfo needs it.
		cmd.Env = append(cmd.Env, "PGPASSWORD="+string(primary.Password))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(sb.DataDir)
		return fmt.Errorf("pg_basebackup of %s for its standby: %w: %s", primary.Name, err, out)
	}
	return pg.SetPort(sb)
}

// waitStreaming waits until the primary has a walsender streaming to
// StandbyAppName.
func waitStreaming(ctx context.Context, primary Server, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.DSN("postgres", true)) // exists on every server
	if err != nil {
		return fmt.Errorf("connect to %s: %w", primary.Name, err)
	}
	defer conn.Close(context.Background())
	for {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", StandbyAppName).Scan(&n)
		if err != nil {
			return fmt.Errorf("standby did not start streaming from %s within %s: %w", primary.Name, timeout, err)
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("standby did not start streaming from %s within %s", primary.Name, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setSyncStandby names the standby in the primary's
// synchronous_standby_names (and turns synchronous_commit on, which Fast
// test servers turn off), or clears it.
func setSyncStandby(ctx context.Context, primary Server, on bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.DSN("postgres", true)) // exists on every server
	if err != nil {
		return fmt.Errorf("connect to %s: %w", primary.Name, err)
	}
	defer conn.Close(context.Background())
	stmts := []string{"ALTER SYSTEM RESET synchronous_standby_names"}
	if on {
		stmts = []string{
			"ALTER SYSTEM SET synchronous_standby_names = " + quoteLiteral(pgx.Identifier{StandbyAppName}.Sanitize()),
			"ALTER SYSTEM SET synchronous_commit = 'on'",
		}
	}
	stmts = append(stmts, "SELECT pg_reload_conf()")
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s on %s: %w", s, primary.Name, err)
		}
	}
	if !on {
		return nil
	}
	// The reload reaches the server's processes a moment later: return once
	// the standby is synchronous, so that the next acknowledged write is on it.
	for {
		var sync bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = $1 AND sync_state = 'sync')", StandbyAppName).Scan(&sync)
		if err != nil {
			return fmt.Errorf("wait for the standby of %s to be synchronous: %w", primary.Name, err)
		}
		if sync {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the standby of %s did not become synchronous: %w", primary.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

// timeline is the server's current timeline (a promotion increments it),
// read in database db.
func timeline(ctx context.Context, s Server, db string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN(db, true))
	if err != nil {
		return 0, fmt.Errorf("connect to %s: %w", s.Name, err)
	}
	defer conn.Close(context.Background())
	var tl int
	// A promotion's end-of-recovery checkpoint may still be running: the
	// timeline in pg_control_checkpoint() is the new one only after it, so
	// read the WAL's (pg_walfile_name of the insert position) instead.
	var walfile string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_insert_lsn())").Scan(&walfile); err != nil {
		return 0, fmt.Errorf("read the timeline of %s: %w", s.Name, err)
	}
	v, err := strconv.ParseInt(walfile[:8], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("timeline of %s from WAL file %s: %w", s.Name, walfile, err)
	}
	tl = int(v)
	return tl, nil
}

func freePortExcept(used map[int]bool) (int, error) {
	for range 100 {
		p, err := FreePort()
		if err != nil {
			return 0, err
		}
		if !used[p] {
			return p, nil
		}
	}
	return 0, errors.New("no free port found")
}

// upStandbys starts the standbys of running primaries (Up restarts what
// crashed).
func (c *Cluster) upStandbys(ctx context.Context, pg *PG, log *slog.Logger) error {
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if n.Standby == nil {
			continue
		}
		if pg.Running(ctx, n.Standby.Server) {
			continue
		}
		if err := c.startStandby(ctx, pg, n, log); err != nil {
			return err
		}
	}
	return nil
}
