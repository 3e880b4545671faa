package join

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/tableset"
)

// Options configure Run.
type Options struct {
	// Fences reads the control database (the topology, with the move's
	// ranges migrating, and the fence holds) from which both shards'
	// fences and guards are derived.
	Fences fence.Control
	// SourceSet is the table set as read from the source's catalog (the
	// publication's); default m.Set.
	SourceSet tableset.Set
	// Replication opens a replication connection (replication=database) to
	// the source, on which the slot is created; the caller owns the DSN,
	// so that no error of Run can quote it. ReplicationDSN connects to one.
	Replication func(ctx context.Context) (*pgconn.PgConn, error)
}

// Result is what JOINING leaves for the phases after it.
type Result struct {
	// L0 is the slot's consistent point: the copy starts after the slot,
	// the stream at L0 (DESIGN.md §4.2).
	L0 pglogrepl.LSN
	// Source identifies the server the slot is on, against which later
	// phases tell a failover (cdc.CheckSource).
	Source cdc.SourceIdentity
}

// Run is the JOINING phase of a move: both shards reconciled with the
// migrating topology (the target fenced wherever it owns nothing, the
// moving ranges included, since only the applier writes there; the source
// wherever it owns nothing; TRUNCATE guards on both), the copy's checkpoint
// schema on the target, then the publication and the slot on the source.
// Idempotent: an existing slot is kept and its confirmed position returned.
func Run(ctx context.Context, m cutover.Move, o Options) (Result, error) {
	if err := m.Check(); err != nil {
		return Result{}, err
	}
	if o.Fences.Store == nil || o.Fences.Pool == nil || o.Replication == nil {
		return Result{}, fmt.Errorf("joining of move %s: the control database and a replication connection to %s are required", m.ID, m.From)
	}
	names, err := cdc.NamesFor(m.ID)
	if err != nil {
		return Result{}, err
	}
	src := o.SourceSet
	if len(src.Tables) == 0 {
		src = m.Set
	}
	if _, err := fence.Reconcile(ctx, m.Target, m.To, m.Set, o.Fences); err != nil {
		return Result{}, fmt.Errorf("target %s: %w", m.To, err)
	}
	if _, err := fence.Reconcile(ctx, m.Source, m.From, src, o.Fences); err != nil {
		return Result{}, fmt.Errorf("source %s: %w", m.From, err)
	}
	if err := backfill.EnsureSchema(ctx, m.Target); err != nil {
		return Result{}, fmt.Errorf("target %s: %w", m.To, err)
	}
	if err := cdc.CreatePublication(ctx, m.Source, names.Publication, src, m.Ranges); err != nil {
		return Result{}, fmt.Errorf("source %s: %w", m.From, err)
	}
	l0, id, err := Slot(ctx, o.Replication, m.From, names.Slot)
	if err != nil {
		return Result{}, err
	}
	return Result{L0: l0, Source: id}, nil
}

// Slot creates a slot (or finds it) over a replication connection that
// connect opens, and identifies the server it is on over the same
// connection: JOINING's slot, and the one a source failover creates again
// on the new primary.
func Slot(ctx context.Context, connect func(context.Context) (*pgconn.PgConn, error), shard, slot string) (pglogrepl.LSN, cdc.SourceIdentity, error) {
	var none cdc.SourceIdentity
	rc, err := connect(ctx)
	if err != nil {
		return 0, none, err
	}
	defer rc.Close(context.WithoutCancel(ctx))
	l0, _, err := cdc.CreateSlot(ctx, rc, slot)
	if err != nil {
		return 0, none, fmt.Errorf("create slot %s on %s: %w", slot, shard, err)
	}
	id, err := cdc.IdentifySource(ctx, rc)
	if err != nil {
		return 0, none, fmt.Errorf("slot %s on %s: %w", slot, shard, err)
	}
	return l0, id, nil
}

// ReplicationDSN connects for replication with dsn (replication=database),
// as Options.Replication does; its errors never quote the DSN, which may
// hold a password.
func ReplicationDSN(dsn, shard string) func(context.Context) (*pgconn.PgConn, error) {
	return func(ctx context.Context) (*pgconn.PgConn, error) {
		cfg, err := pgsession.ParseConfig(dsn)
		if err != nil {
			var pe *pgconn.ParseConfigError
			if errors.As(err, &pe) { // the error holds the DSN, maybe a password
				err = pe.Unwrap()
			}
			return nil, fmt.Errorf("replication connection string of %s: %w", shard, err)
		}
		if cfg.RuntimeParams["replication"] != "database" {
			return nil, fmt.Errorf("the replication connection string of %s needs replication=database", shard)
		}
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to %s for replication: %w", shard, err)
		}
		return conn, nil
	}
}

// RecreateReverse drops the move's reverse slot on the new owner, if there
// is one, and creates it again: Reverse, with a consistent point after every
// transaction committed on the new owner so far. The reverse stream skips only
// transactions that carry a replication origin; a repair of the moving ranges
// carries none, so a slot made before a repair would replay the repair's rows
// (the source's values of that moment) onto the old owner after newer forward
// changes to them. Call it only while the new owner does not own the ranges
// (no cutover published): from the publish on, the slot holds the new owner's
// writes that the old owner still needs, and dropping it loses them.
func RecreateReverse(ctx context.Context, m cutover.Move, targetReplicationDSN string) (cdc.Names, pglogrepl.LSN, error) {
	if err := m.Check(); err != nil {
		return cdc.Names{}, 0, err
	}
	names, err := cdc.ReverseNamesFor(m.ID)
	if err != nil {
		return cdc.Names{}, 0, err
	}
	if err := cdc.DropSlot(ctx, m.Target, names.Slot); err != nil {
		return names, 0, fmt.Errorf("drop the reverse slot of move %s on %s to create it again: %w", m.ID, m.To, err)
	}
	return Reverse(ctx, m, targetReplicationDSN)
}

// Reverse creates the GRACE reverse stream's publication and slot on the
// move's target (the new owner), to be called BEFORE the cutover's write
// pause: creating a slot waits for the target's running write transactions,
// which must not lengthen the pause (DESIGN.md §4.6). It returns the slot's
// consistent point, the reverse stream's StartLSN. Idempotent: on a second
// call the existing slot's confirmed position is returned.
//
// Nothing written on the target before the cutover's unfence is in the moving
// ranges except the forward applier's writes, which the reverse stream skips
// (SkipOrigin), and a repair's (verify.Repair, after a source failover), which
// carry no origin: a slot kept from before a repair is made again with
// RecreateReverse. So starting the reverse stream at this point loses nothing
// and sends back no stale row.
func Reverse(ctx context.Context, m cutover.Move, targetReplicationDSN string) (cdc.Names, pglogrepl.LSN, error) {
	if err := m.Check(); err != nil {
		return cdc.Names{}, 0, err
	}
	names, err := cdc.ReverseNamesFor(m.ID)
	if err != nil {
		return cdc.Names{}, 0, err
	}
	if err := cdc.CreatePublication(ctx, m.Target, names.Publication, m.Set, m.Ranges); err != nil {
		return names, 0, fmt.Errorf("reverse publication of move %s on %s: %w", m.ID, m.To, err)
	}
	conn, err := ReplicationDSN(targetReplicationDSN, m.To)(ctx)
	if err != nil {
		return names, 0, fmt.Errorf("reverse slot of move %s: %w", m.ID, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lsn, _, err := cdc.CreateSlot(ctx, conn, names.Slot)
	if err != nil {
		return names, 0, fmt.Errorf("reverse slot of move %s on %s: %w", m.ID, m.To, err)
	}
	return names, lsn, nil
}
