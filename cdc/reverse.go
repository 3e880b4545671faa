package cdc

import (
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/reshard/reshard/tableset"
)

// ReverseOptions derives the GRACE reverse stream (new owner → old owner)
// from the forward stream's options: the ends swapped, the reverse names,
// SkipOrigin so that transactions written by an applier (the forward
// applier's, carrying its replication origin) are not sent back.
//
// sourceDSN is a plain session on the old owner (the reverse applier's
// target), targetReplicationDSN a replication=database session on the new
// owner; sourceSet is the table set as read from the old owner's catalog.
// The forward stream must be stopped before the reverse stream starts: it
// would otherwise carry the reverse applier's writes back to the new owner.
func ReverseOptions(forward Options, sourceDSN, targetReplicationDSN string, sourceSet tableset.Set, start pglogrepl.LSN) (Options, error) {
	names, err := ReverseNamesFor(forward.Move)
	if err != nil {
		return Options{}, err
	}
	if sourceDSN == "" || targetReplicationDSN == "" || forward.TargetDSN == "" {
		return Options{}, fmt.Errorf("reverse stream of move %s: the old owner's DSN, the new owner's replication DSN and the forward target DSN are required", forward.Move)
	}
	r := forward
	r.SourceReplicationDSN = targetReplicationDSN
	r.SourceDSN = forward.TargetDSN
	r.TargetDSN = sourceDSN
	r.Slot, r.Publication, r.Origin = names.Slot, names.Publication, names.Origin
	r.StartLSN = start
	r.Move = forward.Move + "/reverse" // logs and metric labels only
	r.Set = sourceSet
	r.SkipOrigin = true
	// The reverse stream reads the new owner: the forward source's name and
	// identity are not its own.
	r.Source, r.SourceIdentity = "", SourceIdentity{}
	if forward.Logger != nil {
		r.Logger = forward.Logger.With("direction", "reverse")
	}
	return r, nil
}
