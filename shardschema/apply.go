package shardschema

import (
	"context"
	"fmt"
	"slices"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// ApplyShards are the shards of the keyspace (store is In it) that schema
// apply changes: those of its current ring and both ends of its running
// moves, by name; targets says which are the target of a running move.
func ApplyShards(ctx context.Context, store *topology.Store) ([]string, map[string]bool, error) {
	cur, err := store.Current(ctx)
	if err != nil {
		return nil, nil, err
	}
	running, err := store.RunningMoves(ctx)
	if err != nil {
		return nil, nil, err
	}
	names := cur.Ring.Shards()
	targets := map[string]bool{}
	for _, m := range running {
		names = append(names, m.From, m.To)
		targets[m.To] = true
	}
	slices.Sort(names)
	return slices.Compact(names), targets, nil
}

// Parse parses script against the keyspace's tables (spec, as the first
// of shards has them), for tableset.ApplyDDL: a script it refuses is an
// *pgerr.InputError.
func Parse(ctx context.Context, script string, spec tableset.Spec, shards []tableset.DDLShard) ([]tableset.DDL, error) {
	if len(shards) == 0 {
		return nil, &pgerr.InputError{Err: fmt.Errorf("keyspace %s has no shard", spec.Name)}
	}
	set, err := tableset.Introspect(ctx, shards[0].Pool, spec, "shard "+shards[0].Name)
	if err != nil {
		return nil, err
	}
	stmts, err := tableset.ParseDDL(script, set.Tables)
	if err != nil {
		return nil, &pgerr.InputError{Err: err}
	}
	return stmts, nil
}
