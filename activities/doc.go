// Package activities adapts the domain packages (backfill, cdc, verify,
// cutover, rollback, topology) to Temporal activities.
//
// Invariant: activities are thin. They decode input, resolve shard names to
// DSNs from the worker's own configuration (inputs never carry passwords),
// call one domain function, heartbeat with its checkpoint and classify errors
// as retryable or not in one place (classify).
//
// The forward CDC stream of a move is process-local: RunCDC registers it in
// the Activities value, where Verify, CDCStatus and Cutover — scheduled in the
// same Temporal session, hence on the same worker — find it.
package activities
