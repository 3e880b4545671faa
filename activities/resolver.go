package activities

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Resolver turns shard names into connections, from the worker's own
// configuration. The password is kept here and added only to the
// connection configs and DSNs handed to drivers; it never reaches a payload,
// an error, a log line or a heartbeat.
type Resolver struct {
	Control  string            // DSN of the control database, without password
	Shards   map[string]string // shard name → DSN, without password
	Password string            // "" when the servers need none (trust, passfile)
}

// Known lists the configured shard names, sorted.
func (r *Resolver) Known() []string {
	names := make([]string, 0, len(r.Shards))
	for n := range r.Shards {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// dsn returns the DSN of a shard with the password, for drivers only.
func (r *Resolver) dsn(shard string) (string, error) {
	base, ok := r.Shards[shard]
	if !ok {
		return "", badInput("shard %q is not in the worker configuration (known: %s); add it to the worker's config file", shard, strings.Join(r.Known(), ", "))
	}
	return withPassword(base, r.Password), nil
}

// replicationDSN is dsn with replication=database.
func (r *Resolver) replicationDSN(shard string) (string, error) {
	d, err := r.dsn(shard)
	if err != nil {
		return "", err
	}
	return withParam(d, "replication", "database"), nil
}

func withPassword(dsn, pw string) string {
	if pw == "" {
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		user := ""
		if u.User != nil {
			user = u.User.Username()
		}
		u.User = url.UserPassword(user, pw)
		return u.String()
	}
	return dsn + " password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
}

func withParam(dsn, k, v string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(k, v)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + k + "=" + v
}

// pools caches one pool per shard (and the control database) for the
// worker's life.
type pools struct {
	r  *Resolver
	mu sync.Mutex
	m  map[string]*pgxpool.Pool
}

const controlKey = "\x00control"

func (p *pools) shard(ctx context.Context, name string) (*pgxpool.Pool, error) {
	dsn, err := p.r.dsn(name)
	if err != nil {
		return nil, err
	}
	return p.get(ctx, name, dsn)
}

func (p *pools) control(ctx context.Context) (*pgxpool.Pool, error) {
	if p.r.Control == "" {
		return nil, badInput("the worker configuration names no control database")
	}
	return p.get(ctx, controlKey, withPassword(p.r.Control, p.r.Password))
}

func (p *pools) get(ctx context.Context, key, dsn string) (*pgxpool.Pool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pool, ok := p.m[key]; ok {
		return pool, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the DSN: do not pass it on.
		return nil, badInput("the DSN configured for %s does not parse", printable(key))
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", printable(key), err)
	}
	if p.m == nil {
		p.m = map[string]*pgxpool.Pool{}
	}
	p.m[key] = pool
	return pool, nil
}

func (p *pools) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pool := range p.m {
		pool.Close()
		delete(p.m, k)
	}
}

func printable(key string) string {
	if key == controlKey {
		return "the control database"
	}
	return "shard " + key
}
