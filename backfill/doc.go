// Package backfill copies the rows of a set of token ranges from a source
// shard to a target shard (phase SNAPSHOT_COPY), and deletes the rows of
// ranges in throttled batches (rollback, cleanup).
//
// Invariants: the replication slot exists before any row is copied (the
// caller's JOINING phase); every chunk is one statement on the source, read by
// keyset pagination (by primary key, or by token and primary key through the
// token index); the chunk's rows and its checkpoint commit in one target
// transaction, so a rerun resumes after the last committed chunk and
// re-copying a chunk is harmless; rows outside the moving ranges are never
// read or written; a target row outside the moving ranges is never
// overwritten: a primary-key collision with one stops the copy
// (CollisionError). Target sessions run with session_replication_role =
// replica so fence triggers let them through.
//
// Chunks travel as binary COPY streams that are never decoded: straight into
// the table while no row of the chunk exists on the target, else through a
// temporary staging table and an upsert guarded by the moving-range predicate.
//
// The tables of a set are copied side by side, the table furthest behind its
// share of the plan's estimate reading next, so a copy's rate is the same at
// its start as at its end (turns.go).
//
// Layout: copy.go runs a copy (workers, chunks, the collision check);
// turns.go paces the tables;
// copybin.go moves a chunk as binary COPY; checkpoint.go keeps progress in
// the chunk's transaction; control.go is the live throttle and pause;
// adaptive.go is the adaptive throttle's control law (pure: AIMD over the
// signals against the operator's limits) and signals.go reads the signals
// from the shards and steps the law while the work runs (copy, verify,
// cleanup); slotguard.go brakes a copy whose slot nears its WAL budget
// (max_slot_wal_keep_size, or the configured one) and ends it when the slot
// is lost; standby.go reads the chunks on the source's streaming standby,
// each once the standby has replayed the slot's consistent point;
// delete.go deletes moved rows at CLEANUP; sql.go builds the statements.
package backfill
