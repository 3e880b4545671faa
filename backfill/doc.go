// Package backfill copies the rows of a set of token ranges from a source
// shard to a target shard (phase SNAPSHOT_COPY).
//
// Invariants: the replication slot exists before any row is copied; every chunk
// is a short source transaction read by keyset pagination; the chunk's rows
// and its checkpoint commit in one target transaction, so re-copying a chunk
// after a crash is harmless; rows outside the moving ranges are never written.
package backfill
