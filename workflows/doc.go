// Package workflows holds the deterministic Temporal orchestration of a
// migration: a parent Migration workflow and one child Move workflow per
// source shard, walking PLAN → JOINING → SNAPSHOT_COPY → CDC_CATCH_UP →
// VERIFY → CUTOVER → GRACE → CLEANUP.
//
// Invariant: workflow code does no I/O, reads no clock but workflow.Now, starts
// no goroutines but workflow.Go, and never ranges over a map; everything that
// touches a database happens in activities.
package workflows
