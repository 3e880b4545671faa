// Package topology keeps the versioned source of truth of which shard owns
// which token range, in the control database, and the router applications use.
//
// Invariants: versions are append-only; publishing version v+1 is a
// compare-and-set on v followed by NOTIFY; a router never moves to an older
// version than the one it holds, whatever order versions arrive in.
package topology
