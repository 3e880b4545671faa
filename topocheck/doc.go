// Package topocheck compares every shard of a keyspace with what its
// topology wants (`reshard topology check`, `reshard check placement`): the
// fences and TRUNCATE guards installed against fence.Wanted, the rows held
// in ranges the shard does not own (outside its running moves), and the rows
// with a NULL shard key, which no shard owns. A shard whose fences differ
// while a cutover of one of its moves is midway (its journal read before
// and after the shards says so) is in transition, not drifting; Repair
// reconciles only drifting shards, through fence.Reconcile, and never
// deletes a row.
//
// It reads the control database (topology, running moves, plans, cutover
// journals) and the shards; it imports no Temporal and no CLI.
package topocheck
