// Package cutover hands ownership of moved ranges from source to target:
// fence the source, wait out every transaction that could have passed the
// fence, drain CDC to a marker, publish the new topology, unfence the target.
//
// Invariants: the time from fence to unfence is the write pause, measured and
// bounded by a budget; over budget the cutover aborts by unfencing the source;
// publishing the topology is the point of no return.
//
// Layout: cutover.go is the step sequence (Run, Resume) behind Actions;
// pg.go and move.go the real actions (Move: a move as the phases after the
// copy see it), dryrun.go the printed ones; journal.go the journal and
// attempts (Claim, Guard), pause.go the write pauses derived from it. The
// topology changes of a move (topology.Handover) are package topology's,
// the fences and the in-flight wait package fence's; the phases around the
// cutover are packages join (JOINING, and the reverse stream's slot before
// the pause) and cleanup (CLEANUP); the reverse stream's options are cdc's
// (ReverseOptions). The cutover copies, deletes and compares no rows: it
// imports neither backfill nor verify (internal/layering).
package cutover
