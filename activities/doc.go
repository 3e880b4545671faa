// Package activities adapts the domain packages (backfill, cdc, verify,
// cutover, rollback, topology) to Temporal activities.
//
// Invariant: activities are thin. They decode input, resolve shard names to
// DSNs from the worker's own configuration (inputs never carry passwords),
// call one domain function, heartbeat with its checkpoint and classify errors
// as retryable or not in one place.
package activities
