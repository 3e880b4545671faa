package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/workflows"
)

// The cluster guard. Two clusters (two control databases) whose workers
// poll one Temporal task queue would each run the other's activities
// against their own shards: a copy, a fence or a cleanup on the wrong
// servers. Every activity therefore first compares the cluster its input
// belongs to with the cluster of the worker's control database, and on a
// mismatch returns a non-retryable ErrTypeWrongCluster, having touched no
// shard.
//
// A request made before cluster ids (MigrationRequest.Cluster "", an
// in-flight migration of an older reshard) is accepted only when the
// worker's control database holds the stored plan of that migration id:
// the plan is stored by the migration's Plan activity in its own cluster's
// control database, so the other cluster's workers do not have it. Plan
// itself, which stores that plan, is refused for such a request unless an
// earlier attempt stored it: accepting it would store the plan in the wrong
// control database and open the door to every later activity. Two clusters
// that both ran a migration of the same id before cluster ids are not told
// apart; a request that carries its cluster id always is.

// owned is an activity's input: it names its migration and the cluster
// of its request (workflows' Owner methods), so an activity whose input
// could not be checked does not compile.
type owned interface {
	Owner() (migration, cluster string)
}

// guarded runs fn only for an input of the worker's own cluster.
func guarded[I owned, O any](a *Activities, fn func(context.Context, I) (O, error)) func(context.Context, I) (O, error) {
	return func(ctx context.Context, in I) (O, error) {
		if err := a.ownCluster(ctx, in); err != nil {
			var zero O
			return zero, err
		}
		return fn(ctx, in)
	}
}

// guardedErr is guarded for an activity that returns only an error.
func guardedErr[I owned](a *Activities, fn func(context.Context, I) error) func(context.Context, I) error {
	return func(ctx context.Context, in I) error {
		if err := a.ownCluster(ctx, in); err != nil {
			return err
		}
		return fn(ctx, in)
	}
}

// ownCluster returns nil when in belongs to the cluster of the worker's
// control database, else the non-retryable ErrTypeWrongCluster naming both
// clusters and the fix. It reads the control database only.
func (a *Activities) ownCluster(ctx context.Context, in owned) error {
	id, cluster := in.Owner()
	store, err := a.store(ctx, "")
	if err != nil {
		return classify(err)
	}
	own, err := a.clusterID(ctx)
	if err != nil {
		return classify(err)
	}
	const fix = "two clusters' workers poll the task queue %q of one Temporal namespace; give each cluster its own namespace " +
		"(temporal.namespace in each cluster's reshard.yaml, the same for its worker and its CLI), so that only its own workers run its migrations"
	if cluster != "" {
		if cluster == own {
			return nil
		}
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("migration %s belongs to cluster %s, and this worker's control database is cluster %s's: this worker did nothing; "+fix,
				id, cluster, own, workflows.TaskQueue), workflows.ErrTypeWrongCluster, nil)
	}
	has, err := store.HasPlan(ctx, id)
	if err != nil {
		return classify(err)
	}
	if has {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("migration %s names no cluster (started by a reshard older than this worker) and this worker's control database (cluster %s) holds no plan of it: "+
			"it may be another cluster's, so this worker did nothing; if it is this cluster's, start it again with this reshard; else "+fix,
			id, own, workflows.TaskQueue), workflows.ErrTypeWrongCluster, nil)
}

// clusterID is the id of the worker's control database's cluster, read
// once per process.
func (a *Activities) clusterID(ctx context.Context) (string, error) {
	a.controlMu.Lock()
	id := a.cluster
	a.controlMu.Unlock()
	if id != "" {
		return id, nil
	}
	store, err := a.store(ctx, "")
	if err != nil {
		return "", err
	}
	id, err = store.ClusterID(ctx)
	if err != nil {
		return "", err
	}
	a.controlMu.Lock()
	a.cluster = id
	a.controlMu.Unlock()
	return id, nil
}
