// Package cleanup is the CLEANUP phase of a move (DESIGN.md §4.8) and the
// end of a move in general: Run publishes the ranges stable on their new
// owner, drops both streams, deletes the moved rows from the old owner,
// drops the work rows and reconciles both shards' fences. Its steps are the
// ones a rollback takes too, on the other shard (package rollback calls
// them): DropStreams (the one place a stream's slot, publication and
// origin are dropped; DropForward after the cutover), DeleteRows,
// DropWorkRows, ReconcileBoth.
//
// Invariant: every step is idempotent and reads its state from the
// databases, so a crashed cleanup is finished by calling Run again; Run
// refuses a move whose ranges the topology does not give to the new owner.
package cleanup
