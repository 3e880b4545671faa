// Package fence keeps writes off a shard's token ranges it does not own: a
// trigger per table refuses them with SQLSTATE RSF01 (the router's cue to
// reload the topology and retry), a TRUNCATE guard protects a table whose
// ranges are moving, and the in-flight wait tells when every transaction
// that may have passed a fence before it committed has ended.
//
// Invariant: a shard's fences are derived from the control database by one
// function. Wanted(topology, shard, holds) is the token space the shard does
// not own plus the ranges cutovers hold on it; Reconcile installs exactly
// that, and is the only code that lifts a fence.
//
// A table's objects are named by its fence identity (Ident: a hash of its
// quoted name, never a truncatable "<schema>_<table>"); its triggers are
// installed once, and every later change replaces their functions, which
// takes no lock on the application's table. Where the shard has the
// extension reshard_fence (fence/ext/reshard_fence, optional: a managed
// service cannot load it), the row triggers call its C function instead,
// which tests the token against the ranges the table's plpgsql function
// compiles and calls that function only to refuse: a write that passes
// makes no plpgsql call, and every refusal is the plpgsql function's.
//
// Layout: fence.go is the mechanism (identity, triggers, compiled ranges
// and guard, the accelerator, the layout check); reconcile.go the derivation, the holds,
// Inspect and Reconcile; inflight.go the in-flight wait; strays.go counts
// rows on a shard that does not own them.
package fence
