// Package cutover hands ownership of moved ranges from source to target:
// fence the source, wait out every transaction that could have passed the
// fence, drain CDC to a marker, publish the new topology, unfence the target.
//
// Invariants: the time from fence to unfence is the write pause, measured and
// bounded by a budget; over budget the cutover aborts by unfencing the source;
// publishing the topology is the point of no return.
package cutover
