package cutover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Move is one move as the phases after the copy see it: its ranges, its two
// shards by name (in the topology) and by pool (the orchestrator's sessions:
// a role with the privileges of docs/operations.md, "Privileges" — it sets
// session_replication_role, drops slots, publishes the tables).
type Move struct {
	// ID names the slot, publication, origin, checkpoints and journal.
	ID       string
	From, To string
	Source   *pgxpool.Pool // From
	Target   *pgxpool.Pool // To
	Set      tableset.Set
	Ranges   []ring.Range
}

// Reversed is the same move seen from the other end (the GRACE reverse
// stream, the rollback's reverse cutover): Source is the new owner.
func (m Move) Reversed() Move {
	return Move{ID: m.ID, From: m.To, To: m.From, Source: m.Target, Target: m.Source, Set: m.Set, Ranges: m.Ranges}
}

func (m Move) check() error {
	if m.ID == "" || m.From == "" || m.To == "" || m.Source == nil || m.Target == nil || len(m.Set.Tables) == 0 || len(ring.Normalize(m.Ranges)) == 0 {
		return fmt.Errorf("move %q: id, both shard names and pools, the table set and the ranges are required", m.ID)
	}
	return nil
}

// NewPG returns the real Actions of a cutover of m: fences on m's shards, the
// drain of the running stream s (the forward stream for a cutover, the
// reverse stream for a rollback's reverse cutover — then pass m.Reversed()),
// and the handover h published in fences' store, by the attempt of journal
// j (its Claim: an older attempt publishes nothing); fences are derived from
// the control database by fence.Reconcile. With s nil the actions can settle
// an earlier attempt (Resume) but not drain.
func NewPG(m Move, s cdc.Controller, fences fence.Control, h topology.Handover, j PGJournal) *PG {
	store := fences.Store
	guard := j.Guard()
	p := &PG{
		Source: m.Source, Target: m.Target, From: m.From, To: m.To, Set: m.Set, Ranges: m.Ranges, Move: m.ID, Fences: fences, Epoch: j.Epoch,
		PublishFunc:   func(ctx context.Context) (int64, error) { return h.PublishGuarded(ctx, store, guard) },
		PublishedFunc: func(ctx context.Context) (bool, error) { return h.Published(ctx, store) },
	}
	if s != nil {
		p.DrainFunc = func(ctx context.Context, marker string, _ time.Duration) error {
			_, err := s.DrainToMarker(ctx, marker)
			return err
		}
	}
	return p
}

// PrepareReverse creates the GRACE reverse stream's publication and slot on
// the move's target (the new owner), to be called BEFORE the cutover's write
// pause: creating a slot waits for the target's running write transactions,
// which must not lengthen the pause (DESIGN.md §4.6). It returns the slot's
// consistent point, the reverse stream's StartLSN. Idempotent: on a second
// call the existing slot's confirmed position is returned.
//
// Nothing written on the target before the cutover's unfence is in the moving
// ranges except the forward applier's writes, which the reverse stream skips
// (SkipOrigin), so starting the reverse stream at this point loses nothing.
func PrepareReverse(ctx context.Context, m Move, targetReplicationDSN string) (cdc.Names, pglogrepl.LSN, error) {
	if err := m.check(); err != nil {
		return cdc.Names{}, 0, err
	}
	names, err := cdc.ReverseNamesFor(m.ID)
	if err != nil {
		return cdc.Names{}, 0, err
	}
	if err := cdc.CreatePublication(ctx, m.Target, names.Publication, m.Set, m.Ranges); err != nil {
		return names, 0, fmt.Errorf("reverse publication of move %s on %s: %w", m.ID, m.To, err)
	}
	cfg, err := pgsession.ParseConfig(targetReplicationDSN)
	if err != nil {
		var pe *pgconn.ParseConfigError
		if errors.As(err, &pe) { // the error holds the DSN, maybe a password
			err = pe.Unwrap()
		}
		return names, 0, fmt.Errorf("reverse slot of move %s: target replication connection string: %w", m.ID, err)
	}
	if cfg.RuntimeParams["replication"] != "database" {
		return names, 0, fmt.Errorf("reverse slot of move %s: the target connection string needs replication=database", m.ID)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return names, 0, fmt.Errorf("reverse slot of move %s: connect to %s for replication: %w", m.ID, m.To, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lsn, _, err := cdc.CreateSlot(ctx, conn, names.Slot)
	if err != nil {
		return names, 0, fmt.Errorf("reverse slot of move %s on %s: %w", m.ID, m.To, err)
	}
	return names, lsn, nil
}

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
func ReverseOptions(forward cdc.Options, sourceDSN, targetReplicationDSN string, sourceSet tableset.Set, start pglogrepl.LSN) (cdc.Options, error) {
	names, err := cdc.ReverseNamesFor(forward.Move)
	if err != nil {
		return cdc.Options{}, err
	}
	if sourceDSN == "" || targetReplicationDSN == "" || forward.TargetDSN == "" {
		return cdc.Options{}, fmt.Errorf("reverse stream of move %s: the old owner's DSN, the new owner's replication DSN and the forward target DSN are required", forward.Move)
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
	r.Source, r.SourceIdentity = "", cdc.SourceIdentity{}
	if forward.Logger != nil {
		r.Logger = forward.Logger.With("direction", "reverse")
	}
	return r, nil
}
