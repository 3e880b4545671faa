package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// FenceSQLState is the SQLSTATE a shard raises when a write touches a token
// range fenced on it (DESIGN.md §3): the router's cue to refresh and retry.
// The cutover package raises it from its trigger:
// RAISE EXCEPTION ... USING ERRCODE = 'RSF01'.
const FenceSQLState = pgerr.CodeFenced

// IsFenceError reports whether err is, or wraps, the fence error.
func IsFenceError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == FenceSQLState
}

// ErrFenced: a write (or read) stayed refused by the fence of its range for
// as long as the router may wait (Options.MaxFenceWait, or the
// caller's deadline). The errors Do returns then are *FencedError, which
// matches it with errors.Is.
var ErrFenced = errors.New("range fenced")

// FencedError is what Do and Read return when a fence outlasted the wait
// they were allowed: nothing was written. The range is in a cutover's write
// pause that is taking long (its source may be unreachable) or a cutover is
// stuck; the application may fail the request, queue it, or try again later.
// It unwraps to the shard's fence error (IsFenceError) and matches ErrFenced.
type FencedError struct {
	Shard   string
	Token   int64
	Version int64         // the topology version of the last try
	Waited  time.Duration // from the first fence error to giving up
	Tries   int
	Err     error // the last fence error
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("shard %s still fenced for token %d after %d tries over %s (topology version %d); a cutover is in its write pause or stuck: %v",
		e.Shard, e.Token, e.Tries, e.Waited.Round(time.Millisecond), e.Version, e.Err)
}

func (e *FencedError) Unwrap() error { return e.Err }

func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Token is a key already turned into its token; Route and Do accept it in
// place of a key.
type Token int64

// Options configure a Router. Zero values take the defaults.
type Options struct {
	// KeyType is the type of the table set's shard key; it decides how Route
	// and Do hash a key. Default: the key type of the store's keyspace in
	// the registry, ring.KeyInt when the keyspace is not registered.
	KeyType ring.KeyType
	// PollInterval: how often Run reloads the topology even without NOTIFY
	// (a missed notification, a proxy that drops them). Default 5s; negative
	// disables polling.
	PollInterval time.Duration
	// MaxFenceWait bounds how long one Do (or Read) waits for the fence of
	// its range to lift, retrying, before it returns a *FencedError; the
	// caller's context deadline bounds it too, whichever comes first. A
	// cutover's write pause lasts tens of milliseconds and at most its
	// budget (--cutover-budget, 2s by default) plus the time its source is
	// unreachable: set it above the budget. Default 5s.
	MaxFenceWait time.Duration
	// FenceRetries, when positive, also bounds the number of retries.
	// Default 0: MaxFenceWait alone bounds them.
	FenceRetries int
	// FenceBackoff is the first pause between fence retries when the
	// topology has not changed yet (the write pause of a cutover); it doubles
	// up to MaxFenceBackoff. Defaults 10ms and 250ms.
	FenceBackoff, MaxFenceBackoff time.Duration
	// ReadFallback: Read of a key in a range that is migrating and already
	// cut over (served by its new owner, the old owner still kept current by
	// reverse CDC during the grace period) asks the old owner when fn finds
	// nothing (pgx.ErrNoRows) on the new owner. It turns a false "not found"
	// after a faulty move into an answer, at a price: the answer may be as
	// stale as reverse CDC's lag, and every use is counted
	// (reshard_router_fallback_reads_total) because a non-zero rate means the
	// move lost rows and must not complete. Before cutover the old owner is
	// the owner, so there is nothing to fall back to; writes never fall back.
	ReadFallback bool
	Metrics      *Metrics
	Logger       *slog.Logger // default: discard
}

func (o *Options) defaults() {
	if o.KeyType == "" {
		o.KeyType = ring.KeyInt
	}
	if o.PollInterval == 0 {
		o.PollInterval = 5 * time.Second
	}
	if o.MaxFenceWait == 0 {
		o.MaxFenceWait = 5 * time.Second
	}
	if o.FenceBackoff == 0 {
		o.FenceBackoff = 10 * time.Millisecond
	}
	if o.MaxFenceBackoff == 0 {
		o.MaxFenceBackoff = 250 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// snapshot is what the router routes with; replaced whole, never modified.
type snapshot struct {
	topo *topology.Topology
	prev int64              // the version it replaced (0: none)
	reqs prometheus.Counter // requests routed with it; nil without metrics
}

// Router routes keys to shards for an application. It holds an immutable
// snapshot of the topology behind an atomic pointer, so routing takes no lock,
// and it never moves to an older version than the one it holds, whatever
// order versions arrive in (NOTIFY, polling, refreshes after fence errors).
type Router struct {
	store *topology.Store
	pools map[string]*pgxpool.Pool
	opts  Options
	cur   atomic.Pointer[snapshot]
	// refreshing lets one goroutine reload after a fence error while the
	// others wait for its result instead of all hitting the control DB.
	refreshing chan struct{}
}

// New loads the current topology and returns a router over pools, the
// application's connection pools by shard name (the router never closes
// them). Call Run to follow topology changes.
func New(ctx context.Context, store *topology.Store, pools map[string]*pgxpool.Pool, opts Options) (*Router, error) {
	if opts.KeyType == "" {
		k, err := store.ResolveKeyspace(ctx, store.Keyspace())
		switch {
		case err == nil:
			opts.KeyType = k.KeyType
		case !errors.Is(err, topology.ErrNoKeyspace):
			return nil, fmt.Errorf("router: %w", err)
		}
	}
	opts.defaults()
	if _, err := ring.ParseKeyType(string(opts.KeyType)); err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	r := &Router{store: store, pools: maps.Clone(pools), opts: opts, refreshing: make(chan struct{}, 1)}
	t, err := store.Current(ctx)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	r.offer(t, "initial")
	return r, nil
}

// Topology returns the topology the router routes with.
func (r *Router) Topology() topology.Topology { return *r.cur.Load().topo }

// Version returns the version the router routes with.
func (r *Router) Version() int64 { return r.cur.Load().topo.Version }

// offer makes t the routing topology if it is newer than the current one and
// reports whether it did. Older or equal versions are ignored, so delivery
// order does not matter.
func (r *Router) offer(t topology.Topology, source string) bool {
	next := &snapshot{topo: &t}
	for {
		old := r.cur.Load()
		if old != nil && t.Version <= old.topo.Version {
			r.opts.Metrics.staleOffer()
			return false
		}
		var retire int64
		if old != nil {
			next.prev, retire = old.topo.Version, old.prev
		}
		if next.reqs == nil && r.opts.Metrics != nil {
			next.reqs = r.opts.Metrics.requestCounter(t.Version)
		}
		if r.cur.CompareAndSwap(old, next) {
			r.opts.Metrics.adopted(retire, t.Version, source)
			r.opts.Logger.Info("topology adopted", "ring_version", t.Version, "previous", next.prev, "source", source)
			return true
		}
	}
}

// Refresh reloads the current topology from the control database and adopts
// it if it is newer.
func (r *Router) Refresh(ctx context.Context) error { return r.refresh(ctx, "manual") }

func (r *Router) refresh(ctx context.Context, source string) error {
	t, err := r.store.Current(ctx)
	if err != nil {
		return err
	}
	r.offer(t, source)
	return nil
}

// refreshAfterFence reloads unless another goroutine already moved the
// router past seen while this one waited.
func (r *Router) refreshAfterFence(ctx context.Context, seen int64) error {
	select {
	case r.refreshing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-r.refreshing }()
	if r.Version() > seen {
		return nil
	}
	return r.refresh(ctx, "fence")
}

// Run follows topology changes until ctx ends: it LISTENs on topology.NotifyChannel on
// a dedicated connection (reconnecting with backoff, reloading after every
// (re)connect so nothing published meanwhile is missed) and polls every
// PollInterval. It returns nil when ctx is cancelled.
func (r *Router) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { r.listen(ctx); return nil })
	if r.opts.PollInterval > 0 {
		g.Go(func() error { r.poll(ctx); return nil })
	}
	return g.Wait()
}

func (r *Router) poll(ctx context.Context) {
	tick := time.NewTicker(r.opts.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := r.refresh(ctx, "poll"); err != nil && ctx.Err() == nil {
				r.opts.Logger.Warn("topology poll failed", "error", err)
			}
		}
	}
}

func (r *Router) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.opts.Logger.Warn("topology listener lost, reconnecting", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// listenOnce returns when the connection fails or ctx ends.
func (r *Router) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, r.store.ConnConfig())
	if err != nil {
		return fmt.Errorf("connect to control database: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{topology.NotifyChannel}.Sanitize()); err != nil {
		return fmt.Errorf("listen %s: %w", topology.NotifyChannel, err)
	}
	// Anything published before LISTEN took effect sent no notification to us.
	if err := r.refresh(ctx, "listen"); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		ks, v, err := topology.ParseNotifyPayload(n.Payload)
		if err == nil && (ks != r.store.Keyspace() || v <= r.Version()) {
			continue // another keyspace's; or already there, or older
		}
		if err := r.refresh(ctx, "notify"); err != nil {
			return err
		}
	}
}

// Owner returns the shard owning token under the current topology. It does
// not allocate and records no metrics.
func (r *Router) Owner(token int64) string { return r.cur.Load().topo.Ring.Owner(token) }

// RouteToken returns the shard owning token and the version that says so.
func (r *Router) RouteToken(token int64) (shard string, version int64) {
	s := r.cur.Load()
	if s.reqs != nil {
		s.reqs.Inc()
	}
	return s.topo.Ring.Owner(token), s.topo.Version
}

// Route returns the shard owning key and the version that says so. key is a
// Token, or a key of the router's KeyType: an integer (int, int8..int64,
// uint8..uint32) for integer keys, a string for text keys, [16]byte or
// pgtype.UUID for uuid keys; a string is also accepted for integer and uuid
// keys, in PostgreSQL's text form.
func (r *Router) Route(key any) (shard string, version int64, err error) {
	tok, err := r.Token(key)
	if err != nil {
		return "", 0, err
	}
	shard, version = r.RouteToken(tok)
	return shard, version, nil
}

// Token computes the token of key (see Route for the accepted forms).
func (r *Router) Token(key any) (int64, error) {
	kt := r.opts.KeyType
	wrong := func() (int64, error) {
		return 0, fmt.Errorf("route key of Go type %T: the table set's key type is %s; pass a matching value, a string in PostgreSQL text form, or a router.Token", key, kt)
	}
	var i int64
	switch k := key.(type) {
	case Token:
		return int64(k), nil
	case string:
		return ring.TokenOf(kt, k)
	case [16]byte:
		if kt != ring.KeyUUID {
			return wrong()
		}
		return ring.TokenUUID(k), nil
	case pgtype.UUID:
		if kt != ring.KeyUUID || !k.Valid {
			return wrong()
		}
		return ring.TokenUUID(k.Bytes), nil
	case int64:
		i = k
	case int:
		i = int64(k)
	case int32:
		i = int64(k)
	case int16:
		i = int64(k)
	case int8:
		i = int64(k)
	case uint32:
		i = int64(k)
	case uint16:
		i = int64(k)
	case uint8:
		i = int64(k)
	case uint64:
		if k > math.MaxInt64 {
			return 0, fmt.Errorf("route key %d: out of the bigint range", k)
		}
		i = int64(k)
	default:
		return wrong()
	}
	if kt != ring.KeyInt {
		return wrong()
	}
	return ring.TokenInt64(i), nil
}

// Do runs fn on the pool of the shard owning key. When the shard refuses with
// the fence error (its range moved, or is in a cutover's write pause), Do
// reloads the topology and runs fn again on the owner it names, up to
// FenceRetries times, pausing between tries while the topology has not
// changed. fn must therefore be safe to run again after a fence error: do the
// key's writes in one transaction, which the fence error rolls back.
func (r *Router) Do(ctx context.Context, key any, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	tok, err := r.Token(key)
	if err != nil {
		return err
	}
	return r.do(ctx, tok, fn, false)
}

// Read is Do for reads: the same routing and fence retries, plus the
// ReadFallback of Options when it is on.
func (r *Router) Read(ctx context.Context, key any, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	tok, err := r.Token(key)
	if err != nil {
		return err
	}
	return r.do(ctx, tok, fn, true)
}

func (r *Router) do(ctx context.Context, tok int64, fn func(context.Context, *pgxpool.Pool) error, read bool) error {
	backoff := r.opts.FenceBackoff
	var fencedSince time.Time // the first fence error of this call
	defer func() {
		if !fencedSince.IsZero() {
			r.opts.Metrics.fenceWait(time.Since(fencedSince))
		}
	}()
	for attempt := 0; ; attempt++ {
		s := r.cur.Load()
		shard := s.topo.Ring.Owner(tok)
		pool := r.pools[shard]
		if pool == nil {
			return fmt.Errorf("route token %d: topology version %d names shard %q, which has no pool; pass one in the router's pools", tok, s.topo.Version, shard)
		}
		if s.reqs != nil {
			s.reqs.Inc()
		}
		err := fn(ctx, pool)
		if read && r.opts.ReadFallback && errors.Is(err, pgx.ErrNoRows) {
			if st, ok := s.topo.MigratingAt(tok); ok && st.CutOver() {
				if old := r.pools[st.From]; old != nil {
					r.opts.Metrics.fallbackRead()
					return fn(ctx, old)
				}
			}
		}
		if !IsFenceError(err) {
			return err
		}
		now := time.Now()
		if fencedSince.IsZero() {
			fencedSince = now
		}
		giveUp := func() error {
			r.opts.Metrics.fencedOut()
			return &FencedError{Shard: shard, Token: tok, Version: s.topo.Version, Waited: now.Sub(fencedSince), Tries: attempt + 1, Err: err}
		}
		if (r.opts.FenceRetries > 0 && attempt >= r.opts.FenceRetries) || now.Sub(fencedSince) >= r.opts.MaxFenceWait {
			return giveUp()
		}
		r.opts.Metrics.fenceRetry()
		if rerr := r.refreshAfterFence(ctx, s.topo.Version); rerr != nil {
			// The control database may be down for a moment: the fence may
			// still lift (an aborted cutover unfences its source), so wait
			// and try again with the topology held, within MaxFenceWait.
			r.opts.Logger.Warn("reload topology after a fence error failed; retrying with the topology held", "shard", shard, "version", s.topo.Version, "error", rerr)
		}
		if r.Version() > s.topo.Version {
			continue // a newer topology: retry at once on the owner it names
		}
		wait := min(backoff, r.opts.MaxFenceWait-time.Since(fencedSince))
		if d, ok := ctx.Deadline(); ok && time.Until(d) < wait {
			return giveUp() // the caller's deadline comes before the next try
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting to retry fenced write on shard %s: %w", shard, ctx.Err())
		case <-time.After(max(wait, 0)):
		}
		backoff = min(2*backoff, r.opts.MaxFenceBackoff)
	}
}
