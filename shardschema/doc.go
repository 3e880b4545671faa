// Package shardschema keeps a keyspace's tables alike across its shards:
// Sync gives a shard (a new one, before add-node or split) the tables a
// source shard has, as pg_dump --schema-only writes them, created as the
// roles that own them on the source, without reshard's own triggers; and
// ApplyShards and Parse name the shards `schema apply` changes and parse
// its script against the keyspace's tables.
//
// Invariant: a refused sync (a table defined otherwise on the target, a
// type it lacks, a partitioned table) changes nothing, and its error is an
// *pgerr.InputError naming the difference and the fix; the tables are created in
// one transaction.
//
// Layout: sync.go compares and creates; dump.go runs pg_dump and strips
// its script of what the target must not get; apply.go serves schema apply
// (tableset.ApplyDDL applies); report.go resolves a sync's keyspace and
// source, reads apply's script and renders both commands' results.
package shardschema
