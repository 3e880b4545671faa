// Package topology keeps the versioned source of truth of which shard owns
// which token range, in the control database (package router routes an
// application's keys by it).
//
// Invariants: versions are append-only (a trigger refuses UPDATE, DELETE,
// TRUNCATE and out-of-sequence INSERTs); publishing version v+1 is a
// compare-and-set on v followed, in the same transaction, by NOTIFY
// reshard_topology '<v+1>'; a router never moves to an older version than the
// one it holds, whatever order versions arrive in.
//
// A version is a ring (who owns each token) plus the ranges being moved. A
// migrating range names its source (From) and target (To); its owner, the
// shard that serves it and the one the ring names, is From until cutover and
// To after it. Connection references of shards never hold a password.
//
// Layout: topology.go is the value (ranges, states, versions) and its
// rules; store.go reads and publishes versions with compare-and-set and
// NOTIFY; schema.go is the control database's schema, in numbered steps
// (the routing contract in SQL among them, docs/contract.md); keyspace.go,
// shards.go, plan.go, moveend.go and workers.go are the registry, shard
// states, stored plans, move ends and running workers; handover.go the
// four changes of a move's ranges (Begin, CutOver, Complete, GiveBack),
// migration.go a migration's start and end; skew.go counts rows per owner.
package topology
