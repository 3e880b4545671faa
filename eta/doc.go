// Package eta is reshard's one model of how long work takes: Rate.Time
// (work left at a rate, the longer of rows and bytes), AtLimit (the same
// under a throttle's limits, PLAN's estimate), Window (the rate measured
// over a copy's recent progress, and the copy's end from it) and Shared
// (the end of a copy that shares its target's machine with others). Pure:
// the callers supply the clock; no I/O.
//
// The PLAN estimate (tableset.Report.ETA), the copy's heartbeat and ETA
// gauge (activities' copy meter) all estimate through it, so that the
// figures status shows and the ones PLAN printed are computed by one rule.
package eta
