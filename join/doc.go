// Package join is the JOINING phase of a move (DESIGN.md §4.2): Run
// reconciles both shards' fences and guards with the migrating topology,
// makes the copy's checkpoint schema on the target, and creates the
// publication and the slot on the source; Reverse does the same for the
// GRACE reverse stream on the new owner, before the cutover's write pause.
//
// Invariant: the slot exists before any row is copied, and its consistent
// point L0 is where the stream starts; a second call keeps the slot and
// returns its confirmed position, so a retried JOINING copies nothing twice
// and loses nothing.
package join
