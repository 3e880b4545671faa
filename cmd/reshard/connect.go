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

// withControlDB is withControl for the commands that hand the control
// database to domain packages: its store and pool as a fence.Control.
func withControlDB(cmd *cobra.Command, opts *globalOptions, cf *configFlags, timeout time.Duration,
	f func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error) error {
	return withControl(cmd, opts, cf, timeout, func(ctx context.Context, cfg *clusterConfig, store *topology.Store, pool *pgxpool.Pool) error {
		return f(ctx, cfg, fence.Control{Pool: pool, Store: store})
	})
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
