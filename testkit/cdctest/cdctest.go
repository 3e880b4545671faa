package cdctest

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// Publication creates move's publication of set's ranges on src and
// returns the move's names (cdc.NamesFor).
func Publication(t testing.TB, ctx context.Context, src *pgtest.DB, move string, set tableset.Set, ranges []ring.Range) cdc.Names {
	t.Helper()
	names, err := cdc.NamesFor(move)
	if err != nil {
		t.Fatal(err)
	}
	if err := cdc.CreatePublication(ctx, src.Pool, names.Publication, set, ranges); err != nil {
		t.Fatal(err)
	}
	return names
}

// Slot creates the logical slot named slot on src over a replication
// connection in reshard's session (pgsession), as JOINING does, and returns its consistent point. pgtest
// drops it with the database.
func Slot(t testing.TB, ctx context.Context, src *pgtest.DB, slot string) pglogrepl.LSN {
	t.Helper()
	cfg, err := pgsession.ParseConfig(src.ReplicationDSN())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l0, _, err := cdc.CreateSlot(ctx, rc, slot)
	rc.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l0
}
