package register

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// InitOptions are what reshard init sets up in a keyspace.
type InitOptions struct {
	Keyspace string
	// DSNs are the configured shards' connection strings (no password).
	DSNs map[string]string
	// Members are the shards of the first ring, sorted.
	Members []string
	Ring    ring.Options
	// Tables, when given, are registered in the keyspace.
	Tables tableset.Spec
}

// InitResult is the keyspace's topology after Init.
type InitResult struct {
	Topology  topology.Topology
	Published bool               // Init published it (version 1)
	Keyspace  *topology.Keyspace // the tables registered, if any
}

// Init publishes the keyspace's first topology (a ring over o.Members, each
// registered as an active shard) unless it has one, and registers o.Tables.
// The tables are checked against the ring before it is published: a
// refused init publishes nothing, so its corrected retry gets the ring it
// asks for. store is In the keyspace; the control database is migrated.
func Init(ctx context.Context, store *topology.Store, control *pgxpool.Pool, open Open, o InitOptions) (InitResult, error) {
	plan, err := FirstRing(ctx, store, o.DSNs, o.Members, o.Ring)
	if err != nil {
		return InitResult{}, err
	}
	if plan != nil && len(o.Tables.Tables) > 0 {
		if err := checkFirst(ctx, store, *plan, open, o.Keyspace, o.Tables); err != nil {
			return InitResult{}, err
		}
	}
	t, published, err := Publish(ctx, store, o.DSNs, o.Members, plan)
	if err != nil {
		return InitResult{}, err
	}
	res := InitResult{Topology: t, Published: published}
	if len(o.Tables.Tables) > 0 {
		k, err := Tables(ctx, store, control, open, o.Keyspace, o.Tables)
		if err != nil {
			return res, err
		}
		res.Keyspace = &k
	}
	return res, nil
}

// FirstRing is the first topology init would publish over members, or nil
// when the keyspace has one already. It writes nothing.
func FirstRing(ctx context.Context, store *topology.Store, dsns map[string]string, members []string, o ring.Options) (*topology.Topology, error) {
	_, err := store.Current(ctx)
	if err == nil {
		return nil, nil
	}
	if !errors.Is(err, topology.ErrNoTopology) {
		return nil, err
	}
	specs := make([]ring.Shard, len(members))
	for i, name := range members {
		if _, err := topology.ParseConnRef(dsns[name]); err != nil {
			return nil, badInput("shard %s: %w", name, err)
		}
		specs[i] = ring.Shard{Name: name}
	}
	r, err := ring.Build(specs, o)
	if err != nil {
		return nil, &pgerr.InputError{Err: err}
	}
	next, err := topology.New(r, nil, fmt.Sprintf("initial: reshard init, %d shard(s), %d vnodes each, %s tokens", len(members), o.VNodes, o.Tokens))
	if err != nil {
		return nil, err
	}
	return &next, nil
}

// checkFirst checks spec on every shard of the planned first ring and
// against the registry, as Tables does after the publish, so that nothing
// is published for tables that would be refused.
func checkFirst(ctx context.Context, store *topology.Store, plan topology.Topology, open Open, keyspace string, spec tableset.Spec) error {
	pools, closeAll, err := open(ctx, Shards(plan))
	if err != nil {
		return err
	}
	defer closeAll()
	kt, err := Check(ctx, store, plan, pools, spec)
	if err == nil {
		if err = store.CheckRegistration(ctx, keyspace, kt, spec.Tables); err != nil {
			err = &pgerr.InputError{Err: err}
		}
	}
	var in *pgerr.InputError
	if errors.As(err, &in) {
		msg := strings.TrimSuffix(in.Error(), "\nnothing was registered")
		return badInput("%s\nnothing was published or registered (no topology, no shard): fix this and run reshard init again", msg)
	}
	return err
}

// Publish publishes plan (FirstRing's), after registering its shards; with
// no plan (a topology exists) it returns the current one. It returns the
// current topology and whether it published.
func Publish(ctx context.Context, store *topology.Store, dsns map[string]string, members []string, plan *topology.Topology) (topology.Topology, bool, error) {
	if plan == nil {
		t, err := store.Current(ctx)
		return t, false, err
	}
	for _, name := range members {
		ref, err := topology.ParseConnRef(dsns[name])
		if err != nil {
			return topology.Topology{}, false, badInput("shard %s: %w", name, err)
		}
		if _, err := store.Shard(ctx, name); err == nil {
			continue // registered by another keyspace's init or a migration
		}
		if err := store.RegisterShard(ctx, topology.Shard{Name: name, Conn: ref, State: topology.ShardActive}); err != nil {
			return topology.Topology{}, false, err
		}
	}
	t, err := store.Publish(ctx, 0, *plan)
	if errors.Is(err, topology.ErrVersionConflict) {
		// Another init won the race: show what it published.
		t, err = store.Current(ctx)
		return t, false, err
	}
	return t, err == nil, err
}
