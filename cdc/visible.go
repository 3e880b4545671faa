package cdc

import (
	"fmt"
	"strconv"
	"strings"
)

// A source transaction reaches the stream as soon as its commit record is
// flushed to WAL, which is before the committing backend leaves the proc
// array, that is, before other sessions' snapshots see it (a moment on an
// idle machine, a scheduler slice on a loaded one, the wait for a
// synchronous standby's confirmation on a source that has one). A read on the
// source made while applying such a transaction must therefore check that
// its snapshot sees the transaction: visibleIn.

// visibleIn says whether the source transaction with top-level id xid, which
// the stream received and so has committed, is visible in snap, the text of
// a pg_snapshot ("xmin:xmax:xip,..."): it is unless its id is at or past
// xmax or in the list of transactions running when the snapshot was taken.
func visibleIn(snap string, xid uint32) (bool, error) {
	parts := strings.Split(snap, ":")
	if len(parts) != 3 {
		return false, fmt.Errorf("source snapshot %q: want xmin:xmax:xip", snap)
	}
	xmin, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return false, fmt.Errorf("source snapshot %q: xmin: %w", snap, err)
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return false, fmt.Errorf("source snapshot %q: xmax: %w", snap, err)
	}
	full, ok := fullXid(xmax, xid)
	if !ok {
		return false, nil
	}
	if full < xmin {
		return true, nil
	}
	if parts[2] == "" {
		return true, nil
	}
	for _, s := range strings.Split(parts[2], ",") {
		running, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return false, fmt.Errorf("source snapshot %q: xip: %w", snap, err)
		}
		if running == full {
			return false, nil
		}
	}
	return true, nil
}

// fullXid widens a 32-bit transaction id to the 64-bit one (with its epoch)
// of a transaction that started before a snapshot whose xmax is xmax, or says
// ok=false when xid is at or past xmax (32-bit ids compare modulo 2^32, as
// PostgreSQL compares them: the transaction is less than 2^31 ids away).
func fullXid(xmax uint64, xid uint32) (full uint64, ok bool) {
	back := int32(uint32(xmax) - xid)
	switch {
	case back <= 0:
		return 0, false
	case uint64(back) > xmax: // before the first id the server ever gave: older than any snapshot's xmin
		return 0, true
	}
	return xmax - uint64(back), true
}
