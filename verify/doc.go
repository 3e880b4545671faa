// Package verify compares the moving ranges on source and target by chunked,
// order-independent checksums taken at one LSN, and bisects a mismatching
// chunk down to the primary keys that differ (missing, extra, different).
//
// Invariant: both sides are read at the same position of the source's history
// (a temporary slot's exported snapshot on the source, the CDC applier held at
// its LSN while the target snapshot is taken), so live writes never cause a
// false mismatch. Chunks are primary-key intervals filtered by the moving
// ranges, planned once per run and open at both ends, so together they cover
// every moving row whenever it was written; a row's checksum is over its text
// with the source's columns by name, independent of physical column order.
// Its sessions run under internal/pgsession's settings whoever made the
// pools: the text of a value is the same on both servers, and a row that a
// row-level security policy would hide makes the read fail (row_security
// off) instead of leaving it out of both counts.
//
// Repair (repair.go) uses the same comparison with the source as the truth:
// each chunk that differs is rewritten on the target in one transaction (the
// differing and extra rows deleted, the source's rows copied), nothing else;
// it needs the move's stream stopped, being then the only writer.
//
// Layout: verify.go runs a verify (plan, compare, summarize); plan.go plans
// chunks and records them on the target for resumption; snapshot.go takes
// both sides' snapshots at one LSN, and standby.go the source's on its
// streaming standby (replay paused at a position past the primary's); sql.go builds the checksum statements;
// report.go is the report and its renderings; metrics.go its metrics;
// recheck.go re-checks a run after an aborted cutover: the chunks the
// changes since touched, at a plain source snapshot paired with the applier
// by the stream's witness (no slot, so no wait for a long transaction).
package verify
