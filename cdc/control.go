package cdc

import (
	"context"

	"github.com/jackc/pglogrepl"
)

// Controller is what the other phases use of a running stream (*Stream
// implements it): verify holds the applier at one source LSN to compare both
// sides there (DESIGN.md §4.5), cutover drains to a marker (§4.6).
//
// All methods are safe to call from any goroutine while Run runs in another.
type Controller interface {
	// HoldAt returns once every source transaction whose commit LSN is <= lsn
	// has been applied and committed on the target and none after it; the
	// applier then holds (applies nothing, keeps answering the source's
	// keepalives) until Release. A second HoldAt replaces the first.
	HoldAt(ctx context.Context, lsn pglogrepl.LSN) error
	// Release lets a held applier go on. Releasing when not held is a no-op.
	Release()
	// Positions reports the end of the WAL received from the source, the end
	// LSN of the last source transaction applied and committed on the target
	// (or skipped as irrelevant with nothing pending), and the flush LSN last
	// acknowledged to the source. acked <= applied <= received.
	Positions() (received, applied, acked pglogrepl.LSN)
	// WaitApplied returns once the applied position is >= lsn.
	WaitApplied(ctx context.Context, lsn pglogrepl.LSN) error
	// DrainToMarker returns once the source transaction that carried the
	// marker pg_logical_emit_message(true, 'reshard', payload) has been
	// applied and committed on the target, with the end LSN of that
	// transaction. It works whether the marker arrives before or after the
	// call (markers seen by this stream are remembered).
	DrainToMarker(ctx context.Context, payload string) (pglogrepl.LSN, error)
}
