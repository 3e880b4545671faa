package main

// The one file of cmd/reshard that opens connections itself
// (internal/layering TestNoSQLInTheCLI): the commands hand what it opens to
// the domain packages, which own every statement.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/topology"
)

// openControl connects to the control database. Errors never carry the DSN
// unredacted: it may hold a password.
func openControl(ctx context.Context, dsn, keyspace string) (*topology.Store, func(), error) {
	if dsn == "" {
		return nil, nil, usageError{errors.New("no control database: pass --config FILE or --control-dsn, or set RESHARD_CONTROL_DSN")}
	}
	cfg, err := pgsession.ParsePoolConfig(dsn)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("--control-dsn %s is not a valid PostgreSQL connection string (want postgres://user@host:port/db or host=... dbname=...)", redactDSN(dsn))}
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("control database %s: %w", redactDSN(dsn), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("control database %s: %w", redactDSN(dsn), err)
	}
	return topology.NewStore(pool).In(keyspace), pool.Close, nil
}

// controlErr explains a missing schema instead of printing "relation does not exist".
func controlErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgerr.CodeUndefinedTable || pgErr.Code == pgerr.CodeInvalidSchemaName) {
		return fmt.Errorf("the control database has no topology schema (reshard.topology_versions); it is created by topology.Migrate when the cluster is set up: %w", err)
	}
	if errors.Is(err, topology.ErrNoTopology) {
		return fmt.Errorf("the control database holds no topology yet: %w", err)
	}
	return err
}

// connConfig is a pool config for dsn with the password set in the struct,
// never in a string.
func (c *clusterConfig) connConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgsession.ParsePoolConfig(dsn)
	if err != nil {
		return nil, errors.New("not a valid PostgreSQL connection string")
	}
	if c.password != "" {
		cfg.ConnConfig.Password = c.password
	}
	cfg.MaxConns = 4
	return cfg, nil
}

// connect opens and pings a pool; errors name the server as the user knows
// it and show the DSN redacted.
func (c *clusterConfig) connect(ctx context.Context, what, dsn string) (*pgxpool.Pool, error) {
	cfg, err := c.connConfig(dsn)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", what, err)}
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = p.Ping(ctx); err != nil {
			p.Close()
		}
	}
	if err != nil {
		if authFailed(err) {
			// The server said no to these credentials: the configuration is
			// wrong, not the server down. Bad input, with the fix.
			return nil, usageError{fmt.Errorf("connect to %s (%s): %w; the password or user is wrong: fix the DSN's user, or the password ($%s, password_env or password_file of %s)",
				what, redactDSN(dsn), err, PasswordEnvVar, c.Path)}
		}
		return nil, fmt.Errorf("connect to %s (%s): %w", what, redactDSN(dsn), err)
	}
	return p, nil
}

// authFailed: the server refused the credentials (SQLSTATE class 28:
// invalid authorization specification, e.g. 28P01 wrong password).
func authFailed(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "28")
}

// openShardPools connects to the named shards with the configuration's DSNs.
func (c *clusterConfig) openShardPools(ctx context.Context, names []string) (map[string]*pgxpool.Pool, func(), error) {
	pools := map[string]*pgxpool.Pool{}
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
	}
	for _, n := range names {
		dsn, ok := c.Shards[n]
		if !ok {
			closeAll()
			return nil, nil, usageError{fmt.Errorf("shard %s is not in the configuration %s: add it there (the topology names it)", n, c.Path)}
		}
		p, err := c.connect(ctx, "shard "+n, dsn)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		pools[n] = p
	}
	return pools, closeAll, nil
}

// topologyShard connects to a shard that topology v(ersion) names, with
// the configuration's DSN (csvload.Options.Connect).
func (c *clusterConfig) topologyShard(version int64) func(ctx context.Context, shard string) (*pgxpool.Pool, error) {
	return func(ctx context.Context, shard string) (*pgxpool.Pool, error) {
		dsn, ok := c.Shards[shard]
		if !ok {
			return nil, usageError{fmt.Errorf("topology v%d names shard %s, which is not in the configuration %s", version, shard, c.Path)}
		}
		return c.connect(ctx, "shard "+shard, dsn)
	}
}

// controlDB is the control database's store and pool as a fence.Control.
func controlDB(store *topology.Store, pool *pgxpool.Pool) fence.Control {
	return fence.Control{Pool: pool, Store: store}
}

// clusterPools are the control database and every configured shard, open
// for a command's whole run (reshard demo).
type clusterPools struct {
	fence.Control
	Shards map[string]*pgxpool.Pool
}

// openCluster connects to the control database and every configured shard;
// closeAll closes them.
func (c *clusterConfig) openCluster(ctx context.Context) (cl clusterPools, closeAll func(), err error) {
	store, ctl, err := c.openStore(ctx)
	if err != nil {
		return cl, nil, err
	}
	cl = clusterPools{Control: controlDB(store, ctl), Shards: map[string]*pgxpool.Pool{}}
	closeAll = func() {
		for _, p := range cl.Shards {
			p.Close()
		}
		ctl.Close()
	}
	for _, name := range c.ShardNames() {
		if cl.Shards[name], err = c.connect(ctx, "shard "+name, c.Shards[name]); err != nil {
			closeAll()
			return cl, nil, err
		}
	}
	return cl, closeAll, nil
}

// smallControl is a store on a pool of at most n connections to the
// control database, opened on first use (never pinged here): for the
// worker's health checks and the actions' look at the worker registry.
func (c *clusterConfig) smallControl(ctx context.Context, n int32) (*topology.Store, func(), error) {
	pcfg, err := c.connConfig(c.Control)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("control: %w", err)}
	}
	pcfg.MaxConns = n
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("control database pool: %w", err)
	}
	return topology.NewStore(pool), pool.Close, nil
}

// shardPools opens a small pool per shard of the ring: through cfg's DSN
// and password when the configuration names the shard (cfg nil: none),
// else through its registered reference.
func shardPools(ctx context.Context, t topology.Topology, reg []topology.Shard, overrides map[string]string, cfg *clusterConfig) (map[string]*pgxpool.Pool, func(), error) {
	byName := map[string]topology.Shard{}
	for _, s := range reg {
		byName[s.Name] = s
	}
	pools := map[string]*pgxpool.Pool{}
	closeAll := func() {
		for _, p := range pools {
			p.Close()
		}
	}
	for name := range overrides {
		if !t.Ring.HasShard(name) {
			return nil, nil, usageError{fmt.Errorf("--shard-dsn %s: topology version %d has no shard %s (shards: %s)", name, t.Version, name, strings.Join(t.Ring.Shards(), ", "))}
		}
	}
	for _, name := range t.Ring.Shards() {
		dsn, ok := overrides[name]
		if !ok && cfg != nil {
			dsn, ok = cfg.Shards[name]
		}
		if !ok {
			s, known := byName[name]
			if !known {
				closeAll()
				return nil, nil, usageError{fmt.Errorf("shard %s is not registered; pass --shard-dsn %s=DSN", name, name)}
			}
			dsn = s.Conn.DSN()
		}
		pcfg, err := skewPoolConfig(name, dsn, cfg)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		p, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err == nil {
			err = p.Ping(ctx)
			pools[name] = p
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("shard %s (%s): %w", name, redactDSN(dsn), err)
		}
	}
	return pools, closeAll, nil
}

// skewPoolConfig is the pool of shard name at dsn: with the configuration's
// password (cfg nil: none) when the DSN carries none.
func skewPoolConfig(name, dsn string, cfg *clusterConfig) (*pgxpool.Config, error) {
	pcfg, err := pgsession.ParsePoolConfig(dsn)
	if err != nil {
		return nil, usageError{fmt.Errorf("shard %s: %s is not a valid PostgreSQL connection string", name, redactDSN(dsn))}
	}
	if cfg != nil && cfg.password != "" && pcfg.ConnConfig.Password == "" {
		pcfg.ConnConfig.Password = cfg.password
	}
	pcfg.MaxConns = 2
	return pcfg, nil
}

// verifyConnect opens a pool; messages name the side, never the DSN (it
// may hold a password).
func verifyConnect(ctx context.Context, side, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgsession.ParsePoolConfig(dsn)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s-dsn is not a valid PostgreSQL connection string", side)}
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = p.Ping(ctx); err != nil {
			p.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the %s: %w", side, err)
	}
	return p, nil
}

// withControlDB loads the configuration, connects to the control database
// and runs f with both (the control database as a fence.Control: its store
// and pool, which the commands hand to domain packages), within timeout.
func withControlDB(cmd *cobra.Command, opts *globalOptions, cf *configFlags, timeout time.Duration,
	f func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error) error {
	cfg, err := cf.load(opts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	store, pool, err := cfg.openStore(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(ctx, cfg, controlDB(store, pool))
}

// openStore connects to the control database.
func (c *clusterConfig) openStore(ctx context.Context) (*topology.Store, *pgxpool.Pool, error) {
	p, err := c.connect(ctx, "the control database", c.Control)
	if err != nil {
		return nil, nil, err
	}
	return topology.NewStore(p), p, nil
}

// lazyShards opens the configured shards' pools once each; a shard the
// configuration lacks gets missing's error.
type lazyShards struct {
	cfg     *clusterConfig
	missing func(name string) error
	mu      sync.Mutex
	pools   map[string]*pgxpool.Pool
}

func newLazyShards(cfg *clusterConfig, missing func(name string) error) *lazyShards {
	return &lazyShards{cfg: cfg, missing: missing, pools: map[string]*pgxpool.Pool{}}
}

func (s *lazyShards) open(ctx context.Context, name string) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pools[name]; ok {
		return p, nil
	}
	dsn, ok := s.cfg.Shards[name]
	if !ok {
		return nil, s.missing(name)
	}
	p, err := s.cfg.connect(ctx, "shard "+name, dsn)
	if err != nil {
		return nil, err
	}
	s.pools[name] = p
	return p, nil
}

func (s *lazyShards) close() {
	for _, p := range s.pools {
		p.Close()
	}
}
