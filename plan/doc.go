// Package plan computes what a migration does and checks that the servers
// can do it: the one plan (Make, Compute) and the one check of it (Checks:
// Preflight, the capacity model, the cutover's dry run) that both the CLI's
// dry run (reshard plan, and the checks before reshard
// add-node & co. start a workflow) and the worker's PLAN activity run. So
// the dry run shows the moves, their order and their ids as the worker
// stores and runs them.
//
// The invariant: a plan is a pure function of the topology it starts from,
// the shard registry's weights and domains, and the request (ring.Change);
// the same inputs give the same moves in the same order on every caller.
// Preflight is where every check of the servers before a migration runs;
// anything a plan must refuse because of what the servers hold (space,
// WAL, slots) belongs there.
package plan
