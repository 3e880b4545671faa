// Package router routes an application's reads and writes to the shard that
// owns each key, and follows the topology while reshard moves ranges
// between shards. It is the one package of reshard an application imports.
//
// # Routing a write
//
// Open a pool per shard (the names are the shards' names in the control
// database), a topology store on the control database, and a router over
// them; run it for as long as the application runs:
//
//	store := topology.NewStore(controlPool).In("default") // the keyspace
//	r, err := router.New(ctx, store, map[string]*pgxpool.Pool{"shard1": p1, "shard2": p2}, router.Options{})
//	if err != nil { ... }
//	go r.Run(ctx) // follows topology changes until ctx ends
//
//	err = r.Do(ctx, userID, func(ctx context.Context, pool *pgxpool.Pool) error {
//		_, err := pool.Exec(ctx, `UPDATE users SET name = $2 WHERE id = $1`, userID, name)
//		return err
//	})
//
// Do hashes the key into its token as PostgreSQL does (reshard.token, the
// key type of the keyspace: bigint, text or uuid; a Token passes a token
// already computed) and runs fn on the pool of the shard that owns it.
// Read does the same for reads. Route and RouteToken only say where a key
// goes, with the topology version that says so.
//
// # What RSF01 means
//
// While a range moves, every shard refuses writes to the token ranges it
// does not own with SQLSTATE RSF01 (FenceSQLState, IsFenceError): its
// fence, a trigger on each sharded table. A router holding an older
// topology than the shard's gets RSF01, reloads the topology and runs fn
// again on the owner the new version names; during a cutover's write pause
// (tens of milliseconds, at most the cutover's budget) it retries with a
// backoff until the new owner takes the write. Nothing was written by the
// refused try (the fence error rolls its transaction back), so fn must be
// safe to run again: do a key's writes in one transaction. After
// Options.MaxFenceWait (or the context's deadline) Do gives up with a
// *FencedError (errors.Is(err, ErrFenced)): the range is still fenced, a
// cutover is stuck or its source unreachable; fail the request or queue it.
//
// # How it refreshes
//
// The router routes from an immutable snapshot of the topology behind an
// atomic pointer, so routing takes no lock. Run LISTENs on the control
// database's topology.NotifyChannel (a publish notifies in the same
// transaction), reloading after every reconnect, and also polls every
// Options.PollInterval (5 s) in case a notification is lost; a fence error
// reloads at once (one goroutine reloads, the others wait for it). The
// router never moves to an older version than the one it holds, whatever
// order versions arrive in.
//
// Metrics (NewMetrics; pass them in Options.Metrics) count requests per
// topology version, fence retries and waits, give-ups, fallback reads and
// topology updates: never a key, DSN or credential.
//
// docs/contract.md is the same contract for any language: the SQL
// functions a router calls and the rules it follows.
package router
