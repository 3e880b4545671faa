// Package workflows holds the deterministic Temporal orchestration of a
// migration: a parent Migration workflow and one child Move workflow per
// (source, target) pair, walking PLAN → JOINING → SNAPSHOT_COPY → CDC_CATCH_UP →
// VERIFY → CUTOVER → GRACE → CLEANUP.
//
// Invariant: workflow code does no I/O, reads no clock but workflow.Now, starts
// no goroutines but workflow.Go, and never ranges over a map; everything that
// touches a database happens in activities.
//
// How a move runs:
//   - The parent plans (activity Plan: ring planners, preflight of every pair),
//     publishes the migrating topology, starts the moves, and publishes the
//     stable topology when they have ended. Operators talk to the parent
//     (Updates with validators); it relays to the moves by signal, and the
//     moves report their MoveState back by signal, so the parent's state
//     query has every move.
//   - The copy runs as bounded slices (CopySlice), so pause, throttle and
//     progress belong to the workflow; the copy resumes from its checkpoints
//     in the target, whatever worker runs the next slice.
//   - CDC starts after the copy (the ordering rule of contract.go) as a long
//     activity in a Temporal session; verify (HoldAt) and cutover
//     (DrainToMarker) run in the same session, on the worker that holds the
//     stream. A broken session (its worker died) or a stopped stream makes
//     the move open a new session, restart the stream (it resumes from the
//     target's replication origin) and run the phase activity again.
//   - Every phase change goes through Phase.Next. Histories stay bounded: a
//     move continues as new when the server suggests it (copy, catch-up), and
//     its progress reports to the parent back off to ~50 per phase.
//   - A cancellation requested of either workflow (the Temporal UI's Request
//     Cancellation) is a rollback: the phase's rollback runs on a
//     disconnected context; a move in CLEANUP finishes it (cancel_test.go).
//   - Changes to the commands a recorded history made need workflow.GetVersion;
//     TestReplayRecordedHistories replays testdata/histories.
//
// Layout: contract.go holds the types every side shares (requests, states,
// updates, search attributes) and how a state is shown (PauseText,
// VerifySummary.Text); knobs.go every default and its validation;
// activities.go the activity names, inputs and error types; migration.go the
// parent workflow (plan, publish, children, operator updates); move.go the
// Move workflow, one method per phase; phase.go the phases and their order.
package workflows
