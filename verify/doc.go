// Package verify compares the moving ranges on source and target by chunked,
// order-independent checksums taken at one LSN, and bisects a mismatching
// chunk down to the primary keys that differ.
//
// Invariant: both sides are read at the same position of the source's history,
// so live writes never cause a false mismatch.
package verify
