// Package pgddl installs reshard's own tables and functions on a database.
package pgddl

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockKey is the advisory lock that serializes reshard's DDL on a database.
// CREATE SCHEMA / TABLE IF NOT EXISTS is not safe against a concurrent twin:
// the loser fails on the catalog's unique index (SQLSTATE 23505), which is
// what several moves joining one target at once did.
const lockKey int64 = 0x7265736861726400 // "reshard\0"

// Apply runs ddl, idempotent statements, in one transaction that first takes
// the advisory lock. A positive lockTimeout bounds the wait for that lock and
// for every lock the DDL takes (SQLSTATE 55P03 when it runs out); it is set
// for the transaction only, never left on the pooled connection.
func Apply(ctx context.Context, pool *pgxpool.Pool, ddl string, lockTimeout time.Duration) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if lockTimeout > 0 {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.FormatInt(lockTimeout.Milliseconds(), 10)+"ms'"); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, ddl)
		return err
	})
}
