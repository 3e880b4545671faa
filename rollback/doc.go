// Package rollback undoes a move. Before cutover (BeforeCutover): drop the
// forward slot, publication and origin, delete the copied rows on the target
// in throttled batches, unfence the target, give the ranges back to the old
// owner in the topology. During GRACE (DuringGrace): the cutover in reverse,
// through the same cutover.Run sequence with the move's ends swapped (fence
// the new owner, wait out its in-flight transactions, marker, drain the
// reverse stream, publish the ranges on the old owner, unfence the old
// owner), then clean the new owner.
//
// Invariant: a rollback loses no acknowledged write; the old owner ends with
// every write made on the new owner during GRACE. Every step is idempotent,
// so a rollback interrupted at any point is finished by calling it again.
//
// Topology: a migration publishes its ranges as migrating before the copy, so
// "topology unchanged" means: the ranges are stable on the old owner again
// and the ring is the pre-migration ring, published as a new version by
// compare-and-set (versions are append-only and routers never go back).
// When no version ever named the move, none is published.
//
// Recover (recover.go) finishes a whole migration whose workflow ended with
// work left (terminated, reset, failed after its retries, its history lost)
// from the control database alone: every move not ended is completed when
// its cutover is published (cleanup.Run) and rolled back otherwise
// (BeforeCutover), then the migration's end is published.
package rollback
