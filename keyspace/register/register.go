// Package register registers a keyspace's tables in the control database
// (package keyspace holds the pure names; this package reaches the
// servers): each table is checked on every shard of the keyspace's ring
// first, then registered, and every shard is fenced where it owns nothing.
//
// Invariant: a refused registration registers nothing, and its error is an
// *pgerr.InputError naming the shard and the fix.
package register

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// badInput is a registration the tables or the topology refuse: nothing
// was registered.
var badInput = pgerr.BadInput

// Open connects to the named shards; closeAll closes what it opened.
type Open func(ctx context.Context, shards []string) (pools map[string]*pgxpool.Pool, closeAll func(), err error)

// Shards are the shards that hold or will hold a keyspace's rows in t: the
// ring's and the ends of migrating ranges, sorted.
func Shards(t topology.Topology) []string {
	names := t.Ring.Shards()
	for _, m := range t.Migrating() {
		names = append(names, m.From, m.To)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Tables checks spec on every shard of keyspace name's current topology
// (store is In the keyspace; open connects to its shards), then registers
// it and reconciles every shard's fences and guards. Nothing is registered
// when a check fails. The caller has migrated the control database
// (topology.Migrate).
func Tables(ctx context.Context, store *topology.Store, control *pgxpool.Pool, open Open, name string, spec tableset.Spec) (topology.Keyspace, error) {
	t, err := store.Current(ctx)
	if errors.Is(err, topology.ErrNoTopology) {
		return topology.Keyspace{}, badInput("keyspace %s has no ring yet: run reshard init --keyspace %s --shards ... first", name, name)
	}
	if err != nil {
		return topology.Keyspace{}, err
	}
	if m := t.Migrating(); len(m) > 0 {
		return topology.Keyspace{}, badInput("topology v%d has %d range(s) migrating (migration %s): a migration moves the tables it started with; register tables after it ends", t.Version, len(m), t.MigrationID)
	}
	pools, closeAll, err := open(ctx, Shards(t))
	if err != nil {
		return topology.Keyspace{}, err
	}
	defer closeAll()
	kt, err := Check(ctx, store, t, pools, spec)
	if err != nil {
		return topology.Keyspace{}, err
	}
	k, err := store.RegisterTables(ctx, name, kt, spec.Tables)
	if err != nil {
		return topology.Keyspace{}, &pgerr.InputError{Err: err}
	}
	ctl := fence.Control{Pool: control, Store: store}
	whole := k.Spec()
	for _, n := range Shards(t) {
		set, err := tableset.Introspect(ctx, pools[n], whole, "shard "+n)
		if err == nil {
			_, err = fence.Reconcile(ctx, pools[n], n, set, ctl)
		}
		if err != nil {
			return k, fmt.Errorf("registered, but fencing shard %s failed (run reshard topology check --repair): %w", n, err)
		}
	}
	return k, nil
}

// Check introspects spec on every shard of t (tables, primary keys, key
// columns NOT NULL under a deterministic collation, one key type, no
// partitioned table) and looks for rows on shards that do not own them. A
// table no shard has is named with the closest tables the shards have or
// the registry (store) holds. It returns the tables' key type.
func Check(ctx context.Context, store *topology.Store, t topology.Topology, pools map[string]*pgxpool.Pool, spec tableset.Spec) (ring.KeyType, error) {
	if err := locate(ctx, store, t, pools, spec); err != nil {
		return "", err
	}
	var kt ring.KeyType
	var strays []string
	for _, n := range Shards(t) {
		set, err := tableset.Introspect(ctx, pools[n], spec, "shard "+n)
		if err != nil {
			var p *tableset.Problem
			if errors.As(err, &p) {
				return "", &pgerr.InputError{Err: err}
			}
			return "", err
		}
		if err := tableset.ShardableSet(set, "shard "+n); err != nil {
			return "", badInput("%w\nnothing was registered", err)
		}
		if kt == "" {
			kt = set.KeyType
		} else if set.KeyType != kt {
			return "", badInput("the key type of the tables is %s on one shard and %s on %s: the shards' schemas differ", kt, set.KeyType, n)
		}
		found, err := fence.Strays(ctx, pools[n], set, fence.StraySpace(t, n))
		if err != nil {
			return "", err
		}
		for _, s := range found {
			strays = append(strays, fmt.Sprintf("  shard %s: %d row(s) of %s in ranges it does not own in %s (keys %s)", n, s.Rows, s.Table, ringName(t), strings.Join(s.Samples, ", ")))
		}
	}
	if len(strays) > 0 {
		return "", badInput("rows are on shards that do not own them; move them to their owners (reshard ring show --ranges names each shard's ranges) or delete them, then register again; nothing was registered:\n%s", strings.Join(strays, "\n"))
	}
	return kt, nil
}

// locate finds each table of spec on the shards of t, naming a table no
// shard has with the closest the shards have or the registry holds.
func locate(ctx context.Context, store *topology.Store, t topology.Topology, pools map[string]*pgxpool.Pool, spec tableset.Spec) error {
	servers := map[string]tableset.Querier{}
	for _, n := range Shards(t) {
		servers[n] = pools[n]
	}
	all, err := store.Keyspaces(ctx)
	if err != nil {
		return err
	}
	var registered []string
	for _, k := range all {
		for _, r := range k.Tables {
			registered = append(registered, r.Schema+"."+r.Table)
		}
	}
	if err := tableset.Locate(ctx, servers, spec, registered); err != nil {
		var p *tableset.Problem
		if errors.As(err, &p) {
			return badInput("%w\nnothing was registered", err)
		}
		return err
	}
	return nil
}

// ringName names t in messages: its version, or the ring init plans.
func ringName(t topology.Topology) string {
	if t.Version == 0 {
		return "the planned ring"
	}
	return fmt.Sprintf("topology v%d", t.Version)
}
