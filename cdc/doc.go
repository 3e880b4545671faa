// Package cdc streams pgoutput changes from a move's logical slot and applies
// those whose token falls in the moving ranges to the target (CDC_CATCH_UP),
// and, reversed, from the new owner back to the old one during GRACE.
//
// Invariants: changes are applied in source commit order; the applied LSN
// commits in the same target transaction as the changes (replication origin);
// the flush LSN acknowledged to the source is only ever an applied and
// committed one; every write on the target carries the moving-range predicate.
package cdc
