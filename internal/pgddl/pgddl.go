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

// Apply runs ddl, idempotent statements, in one transaction under the
// advisory lock (Locked). A positive lockTimeout bounds the wait for that
// lock and for every lock the DDL takes (SQLSTATE 55P03 when it runs out);
// it is set for the lock's wait and the transaction only, never left on
// the pooled connection.
func Apply(ctx context.Context, pool *pgxpool.Pool, ddl string, lockTimeout time.Duration) error {
	return Locked(ctx, pool, lockKey, lockTimeout, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, ddl)
		return err
	})
}

// Locked runs fn in a transaction that begins once the session holds the
// advisory lock key, and releases the lock after it ends.
//
// The lock is a session lock taken before BEGIN, not a transaction lock
// taken inside it: a transaction reads the catalog changes committed before
// it when it starts (and when it locks a relation), not when an advisory
// lock it waited for is granted. With the lock inside, a session that had
// dropped the schema and looked it up while it was missing ran CREATE
// SCHEMA IF NOT EXISTS after its twin committed the schema, still found
// none, and failed on pg_namespace_nspname_index (23505), as Joins on a
// target shared by four moves did in e2e and CI runs
// (TestApplyAfterTheSchemaWasLookedUpMissing). A BEGIN after the grant
// sees every change committed before it.
func Locked(ctx context.Context, pool *pgxpool.Pool, key int64, lockTimeout time.Duration, fn func(tx pgx.Tx) error) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A session whose lock state is unknown (the lock's transaction or the
	// unlock failed after the grant) is closed, which releases the lock,
	// rather than handed back to the pool holding it.
	held, dropped := false, false
	drop := func() {
		dropped = true
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = c.Hijack().Close(closeCtx)
	}
	defer func() {
		if held && !dropped {
			if _, err := c.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key); err != nil {
				drop()
			}
		}
		if !dropped {
			c.Release()
		}
	}()
	setTimeout := func(tx pgx.Tx) error {
		if lockTimeout <= 0 {
			return nil
		}
		_, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.FormatInt(lockTimeout.Milliseconds(), 10)+"ms'")
		return err
	}
	// The wait in a transaction of its own, for SET LOCAL: the session
	// lock outlives its commit.
	err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if err := setTimeout(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
		held = err == nil
		return err
	})
	if err != nil {
		if held { // granted, then the commit failed
			drop()
		}
		return err
	}
	return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if err := setTimeout(tx); err != nil {
			return err
		}
		return fn(tx)
	})
}
