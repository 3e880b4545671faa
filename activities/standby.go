package activities

import (
	"context"
	"errors"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/workflows"
)

// readSource is where a move's copy and verify read the source's rows:
// the primary's pool, or with --read-from standby the pool of the
// source's standby (standby true), once cdc.CheckStandby has found it a
// standby of the server the move's slot is on.
func (a *Activities) readSource(ctx context.Context, m workflows.MoveRef, primary *pgxpool.Pool) (pool *pgxpool.Pool, standby bool, err error) {
	if m.Request == nil || m.Request.ReadFrom != workflows.ReadFromStandby {
		return primary, false, nil
	}
	dsn, err := a.pools.r.standbyDSN(m.Spec.Source)
	if err != nil {
		return nil, false, err
	}
	if err := cdc.CheckStandby(ctx, withParam(dsn, "replication", "database"), m.Spec.Source, sourceIdentity(m.Source)); err != nil {
		return nil, false, err
	}
	pool, err = a.pools.standby(ctx, m.Spec.Source)
	return pool, err == nil, err
}

// copyStandby is the copy's backfill.Standby for a move read from the
// source's standby: no chunk is read before the standby replayed L0.
func copyStandby(m workflows.MoveRef) (*backfill.Standby, error) {
	if m.Source == nil || m.Source.L0 == "" {
		return nil, badInput("move %s: --read-from standby needs the slot's L0 recorded at JOINING, which this move (joined by an older worker) lacks: resume it with --read-from primary", m.Spec.ID)
	}
	l0, err := pglogrepl.ParseLSN(m.Source.L0)
	if err != nil {
		return nil, badInput("move %s: recorded L0 %q: %v", m.Spec.ID, m.Source.L0, err)
	}
	return &backfill.Standby{Name: "the standby of " + m.Spec.Source, Floor: l0}, nil
}

// preflightStandby is PLAN's check of --read-from standby: the source has
// a standby in the configuration, and it is a standby of the source's
// primary as it is now (the move's slot does not exist yet).
func (a *Activities) preflightStandby(ctx context.Context, m workflows.MoveRef) error {
	if m.Request == nil || m.Request.ReadFrom != workflows.ReadFromStandby {
		return nil
	}
	dsn, err := a.pools.r.standbyDSN(m.Spec.Source)
	if err != nil {
		return err
	}
	primary, err := a.pools.r.replicationDSN(m.Spec.Source)
	if err != nil {
		return err
	}
	cfg, err := pgsession.ParseConfig(primary)
	if err != nil {
		return badInput("the replication DSN of %s does not parse", printable(m.Spec.Source))
	}
	rc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return &cdc.ConnError{Op: "replication connection to " + m.Spec.Source, Err: errors.New("cannot connect")}
	}
	id, err := cdc.IdentifySource(ctx, rc)
	rc.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	return cdc.CheckStandby(ctx, withParam(dsn, "replication", "database"), m.Spec.Source, id)
}
