// Package statusview builds what `reshard status` shows of a migration from
// its workflow's state: AddLive adds the figures only the running
// activities' last heartbeats know (retries, the copy slice's rows and end,
// a verify's progress, the stream's lag, a failover a stream found, the
// adaptive throttle), and ViewMove turns a move's state into the texts of
// its line, and Bars draws --watch's progress bars on a terminal. Pure:
// the caller asks Temporal (Sources) and prints.
package statusview
