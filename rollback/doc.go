// Package rollback undoes a move. Before cutover: stop CDC, drop slot and
// publication, delete the copied rows on the target, remove target fences.
// During GRACE: the cutover in reverse, then clean the target.
//
// Invariant: a rollback loses no acknowledged write; the old owner ends with
// every write made on the new owner during GRACE.
package rollback
