package activities

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/reshard/reshard/internal/pgsession"
)

// Resolver turns shard names into connections, from the worker's own
// configuration. The password is kept here and added only to the
// connection configs and DSNs handed to drivers; it never reaches a payload,
// an error, a log line or a heartbeat.
//
// A worker reloads its configuration while it runs (Update); the fields
// are read under mu.
type Resolver struct {
	Control  string            // DSN of the control database, without password
	Shards   map[string]string // shard name → DSN, without password
	Password string            // "" when the servers need none (trust, passfile)
	// Standbys maps a shard name to the DSN of a streaming standby of its
	// primary (without password): a migration run with --read-from
	// standby reads its copy and verify there.
	Standbys map[string]string

	mu sync.RWMutex
}

// Update takes a reloaded configuration's shards and password and returns
// the shard names whose DSN changed or went away (their pools must be
// dropped), and whether the password changed (every pool must be).
func (r *Resolver) Update(shards map[string]string, password string) (changed []string, passwordChanged bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, dsn := range r.Shards {
		if shards[n] != dsn {
			changed = append(changed, n)
		}
	}
	sort.Strings(changed)
	passwordChanged = password != r.Password
	r.Shards = maps.Clone(shards)
	r.Password = password
	return changed, passwordChanged
}

// Known lists the configured shard names, sorted.
func (r *Resolver) Known() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.known()
}

func (r *Resolver) known() []string {
	names := make([]string, 0, len(r.Shards))
	for n := range r.Shards {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// dsn returns the DSN of a shard with the password, for drivers only.
func (r *Resolver) dsn(shard string) (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	base, ok := r.Shards[shard]
	if !ok {
		return "", badInput("shard %q is not in the worker configuration (known: %s); add it to the worker's config file (a running worker reloads it within seconds)", shard, strings.Join(r.known(), ", "))
	}
	return withPassword(base, r.Password), nil
}

// shardDSN is the configured DSN of a shard, without password.
func (r *Resolver) shardDSN(shard string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.Shards[shard]
	return d, ok
}

// SetStandbys replaces the shards' standbys (a reload) and returns the
// shards whose standby changed or went away.
func (r *Resolver) SetStandbys(standbys map[string]string) (changed []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for n, dsn := range r.Standbys {
		if standbys[n] != dsn {
			changed = append(changed, n)
		}
	}
	sort.Strings(changed)
	r.Standbys = maps.Clone(standbys)
	return changed
}

// standbyDSN is the DSN of a shard's standby with the password.
func (r *Resolver) standbyDSN(shard string) (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	base, ok := r.Standbys[shard]
	if !ok {
		return "", badInput("shard %q has no standby in the worker configuration: give its entry under shards a standby: DSN (dsn: and standby:) in reshard.yaml, or run the migration with --read-from primary", shard)
	}
	return withPassword(base, r.Password), nil
}

// controlDSN is the control database's DSN with the password.
func (r *Resolver) controlDSN() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.Control == "" {
		return ""
	}
	return withPassword(r.Control, r.Password)
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

// standbyKey keys a shard's standby pool: never a shard name.
func standbyKey(shard string) string { return "\x00standby " + shard }

// standby is the pool of a shard's standby.
func (p *pools) standby(ctx context.Context, shard string) (*pgxpool.Pool, error) {
	dsn, err := p.r.standbyDSN(shard)
	if err != nil {
		return nil, err
	}
	return p.get(ctx, standbyKey(shard), dsn)
}

func (p *pools) control(ctx context.Context) (*pgxpool.Pool, error) {
	dsn := p.r.controlDSN()
	if dsn == "" {
		return nil, badInput("the worker configuration names no control database")
	}
	return p.get(ctx, controlKey, dsn)
}

// drop forgets the pools of the named shards (all, control included, with
// none named) so that the next use connects with the new configuration. The
// old pools close once the work holding their connections returns them
// (pgxpool.Close waits for that; a CDC stream may hold one for days).
func (p *pools) drop(names ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, pool := range p.m {
		if len(names) == 0 || slices.Contains(names, k) {
			go pool.Close()
			delete(p.m, k)
		}
	}
}

func (p *pools) get(ctx context.Context, key, dsn string) (*pgxpool.Pool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pool, ok := p.m[key]; ok {
		return pool, nil
	}
	cfg, err := pgsession.ParsePoolConfig(dsn)
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
	if shard, ok := strings.CutPrefix(key, standbyKey("")); ok {
		return "the standby of shard " + shard
	}
	return "shard " + key
}
