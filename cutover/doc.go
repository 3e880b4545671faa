// Package cutover hands ownership of moved ranges from source to target:
// fence the source, wait out every transaction that could have passed the
// fence, drain CDC to a marker, publish the new topology, unfence the target.
//
// Invariants: the time from fence to unfence is the write pause, measured and
// bounded by a budget; over budget the cutover aborts by unfencing the source;
// publishing the topology is the point of no return.
//
// Layout: cutover.go is the step sequence (Run, Resume) behind Actions;
// pg.go and move.go the real actions, dryrun.go the printed ones;
// journal.go the journal and attempts (Claim, Guard), pause.go the write
// pauses derived from it; cleanup.go CLEANUP. The topology changes of a
// move (topology.Handover) are package topology's, the fences and the
// in-flight wait package fence's.
package cutover
