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
//
// Layout: activities.go registers the activities, classifies errors and
// keeps the process-local streams; plan.go is PLAN and the publishes;
// move.go one adapter per phase activity; resolver.go turns shard names into
// pools; series.go and controlmetrics.go are the worker's metrics (move
// series deleted when a move ends; the control database's gauges).
package activities
