package cutover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// TruncateSQLState is the SQLSTATE of a TRUNCATE refused during a move.
const TruncateSQLState = "RST01"

// schemaSQL creates the fence registry: one row per fenced table, holding the
// fenced token ranges as an int8multirange and the topology epoch that set
// them. One row per table keeps the trigger's lookup a single index probe.
const schemaSQL = `
CREATE SCHEMA IF NOT EXISTS reshard;
CREATE TABLE IF NOT EXISTS reshard.fence (
	tbl    regclass PRIMARY KEY,
	ranges int8multirange NOT NULL DEFAULT '{}',
	epoch  bigint NOT NULL DEFAULT 0
);
CREATE OR REPLACE FUNCTION reshard.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	RAISE EXCEPTION 'reshard: TRUNCATE of %.% is refused while a move of its token ranges runs', TG_TABLE_SCHEMA, TG_TABLE_NAME
		USING ERRCODE = 'RST01', HINT = 'delete the rows instead, or wait until the move is cleaned up or rolled back';
END $f$;
`

// lockTimeout bounds how long trigger DDL waits behind running transactions
// before it gives up and retries, so a long transaction never queues every
// application write behind our ACCESS EXCLUSIVE-ish lock request.
const lockTimeout = 2 * time.Second

// EnsureSchema creates the fence registry on a shard; idempotent.
func EnsureSchema(ctx context.Context, pool *pgxpool.Pool) error {
	return withLockRetry(ctx, func() error {
		_, err := pool.Exec(ctx, "SET lock_timeout = '2s';"+schemaSQL)
		return err
	})
}

// triggerFunc is the name of the generated fence function of a table: the key
// column is compiled in, so the trigger does no dynamic SQL.
func triggerFunc(t tableset.Table) pgx.Identifier {
	return pgx.Identifier{"reshard", "fence_" + t.Schema + "_" + t.Name}
}

func fenceFunctionSQL(t tableset.Table) string {
	// plpgsql's NEW and OLD are lower-case names once quoted.
	tokNew := ring.TokenSQL(t.KeyType, "new", t.KeyColumn)
	tokOld := ring.TokenSQL(t.KeyType, "old", t.KeyColumn)
	key := pgx.Identifier{t.KeyColumn}.Sanitize()
	// Kept lean, it runs for every application row write: one index probe
	// that finds nothing while the table has no fenced range, one token per
	// row (an UPDATE that keeps its key is checked once), the epoch and the
	// range read only to word the error.
	return `CREATE OR REPLACE FUNCTION ` + triggerFunc(t).Sanitize() + `() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
	r int8multirange;
	tok bigint;
BEGIN
	SELECT ranges INTO r FROM reshard.fence WHERE tbl = TG_RELID AND NOT isempty(ranges);
	IF NOT FOUND THEN
		RETURN COALESCE(NEW, OLD);
	END IF;
	IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND NEW.` + key + ` IS DISTINCT FROM OLD.` + key + `) THEN
		tok := ` + tokOld + `;
		IF r @> tok THEN
			RAISE EXCEPTION 'reshard fence: % on %.% refused: token % lies in fenced range % at topology epoch %', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, tok,
				(SELECT x FROM unnest(r) x WHERE x @> tok), (SELECT epoch FROM reshard.fence WHERE tbl = TG_RELID)
				USING ERRCODE = 'RSF01', HINT = 'this shard no longer owns the range (or does not own it yet): refresh the topology and retry on the owner';
		END IF;
	END IF;
	IF TG_OP <> 'DELETE' THEN
		tok := ` + tokNew + `;
		IF r @> tok THEN
			RAISE EXCEPTION 'reshard fence: % on %.% refused: token % lies in fenced range % at topology epoch %', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME, tok,
				(SELECT x FROM unnest(r) x WHERE x @> tok), (SELECT epoch FROM reshard.fence WHERE tbl = TG_RELID)
				USING ERRCODE = 'RSF01', HINT = 'this shard no longer owns the range (or does not own it yet): refresh the topology and retry on the owner';
		END IF;
	END IF;
	RETURN COALESCE(NEW, OLD);
END $f$`
}

// InstallTriggers puts the fence trigger (and, with truncateGuard, the
// TRUNCATE guard) on every table of the set. Idempotent; trigger DDL waits at
// most lockTimeout behind running transactions per attempt and is retried.
// Installing the trigger fences nothing by itself: ranges are fenced by Fence.
func InstallTriggers(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, truncateGuard bool) error {
	if err := EnsureSchema(ctx, pool); err != nil {
		return fmt.Errorf("install fence schema: %w", err)
	}
	for _, t := range set.Tables {
		stmts := []string{
			"SET LOCAL lock_timeout = '" + strconv.Itoa(int(lockTimeout.Milliseconds())) + "ms'",
			fenceFunctionSQL(t),
			"INSERT INTO reshard.fence (tbl) VALUES (" + quoteLiteral(t.Quoted()) + "::regclass) ON CONFLICT (tbl) DO NOTHING",
			// CREATE OR REPLACE TRIGGER takes SHARE ROW EXCLUSIVE, which
			// readers pass; DROP TRIGGER would take ACCESS EXCLUSIVE.
			"CREATE OR REPLACE TRIGGER reshard_fence BEFORE INSERT OR UPDATE OR DELETE ON " + t.Quoted() +
				" FOR EACH ROW EXECUTE FUNCTION " + triggerFunc(t).Sanitize() + "()",
		}
		if truncateGuard {
			stmts = append(stmts,
				"CREATE OR REPLACE TRIGGER reshard_no_truncate BEFORE TRUNCATE ON "+t.Quoted()+" FOR EACH STATEMENT EXECUTE FUNCTION reshard.refuse_truncate()")
		}
		if err := withLockRetry(ctx, func() error { return inTx(ctx, pool, stmts) }); err != nil {
			return fmt.Errorf("install fence trigger on %s: %w", t, err)
		}
	}
	return nil
}

// RemoveTruncateGuard lifts the TRUNCATE guard when a move ends. The fence
// triggers stay: a shard keeps fences for ranges it gave away.
func RemoveTruncateGuard(ctx context.Context, pool *pgxpool.Pool, set tableset.Set) error {
	for _, t := range set.Tables {
		stmts := []string{"SET LOCAL lock_timeout = '2s'", "DROP TRIGGER IF EXISTS reshard_no_truncate ON " + t.Quoted()}
		if err := withLockRetry(ctx, func() error { return inTx(ctx, pool, stmts) }); err != nil {
			return fmt.Errorf("remove TRUNCATE guard of %s: %w", t, err)
		}
	}
	return nil
}

// RemoveTriggers drops the fence triggers and registry rows of the set's
// tables (rollback of a target that never owned the ranges).
func RemoveTriggers(ctx context.Context, pool *pgxpool.Pool, set tableset.Set) error {
	var registry bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('reshard.fence') IS NOT NULL`).Scan(&registry); err != nil {
		return fmt.Errorf("look up the fence registry: %w", err)
	}
	for _, t := range set.Tables {
		stmts := []string{
			"SET LOCAL lock_timeout = '2s'",
			"DROP TRIGGER IF EXISTS reshard_fence ON " + t.Quoted(),
			"DROP TRIGGER IF EXISTS reshard_no_truncate ON " + t.Quoted(),
			"DROP FUNCTION IF EXISTS " + triggerFunc(t).Sanitize() + "()",
		}
		if registry { // never installed: nothing to forget
			stmts = append(stmts, "DELETE FROM reshard.fence WHERE tbl = "+quoteLiteral(t.Quoted())+"::regclass")
		}
		if err := withLockRetry(ctx, func() error { return inTx(ctx, pool, stmts) }); err != nil {
			return fmt.Errorf("remove fence trigger of %s: %w", t, err)
		}
	}
	return nil
}

// multirange renders ranges as an int8multirange literal expression. A range
// reaching MaxToken gets an unbounded upper end (int8range cannot hold
// MaxToken+1), and one from MinToken an unbounded lower end, which includes
// MinToken as the Range convention says.
func multirange(rs []ring.Range) string {
	rs = ring.Normalize(rs)
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		lo, hi := strconv.FormatInt(r.Lo, 10), strconv.FormatInt(r.Hi, 10)
		if r.Lo == ring.MinToken {
			lo = "NULL"
		}
		if r.Hi == ring.MaxToken {
			hi = "NULL"
		}
		parts = append(parts, "int8range("+lo+", "+hi+", '(]')")
	}
	return "int8multirange(" + strings.Join(parts, ", ") + ")"
}

// Fence adds ranges to the fenced set of every table of the set on this shard,
// at topology epoch epoch, in one transaction: from its commit on, every new
// statement of an application writing a key in those ranges is refused.
// Idempotent.
func Fence(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, ranges []ring.Range, epoch int64) error {
	return setFence(ctx, pool, set, "+", ranges, epoch)
}

// Unfence removes ranges from the fenced set of the set's tables. Idempotent.
func Unfence(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, ranges []ring.Range, epoch int64) error {
	return setFence(ctx, pool, set, "-", ranges, epoch)
}

func setFence(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, op string, ranges []ring.Range, epoch int64) error {
	err := withLockRetry(ctx, func() error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
				return err
			}
			for _, t := range set.Tables {
				tag, err := tx.Exec(ctx, "UPDATE reshard.fence SET ranges = ranges "+op+" "+multirange(ranges)+
					", epoch = greatest(epoch, "+strconv.FormatInt(epoch, 10)+") WHERE tbl = "+quoteLiteral(t.Quoted())+"::regclass")
				if err != nil {
					return err
				}
				// A fence on a table without its trigger would fence nothing:
				// say so instead of succeeding.
				if tag.RowsAffected() == 0 && op == "+" {
					return fmt.Errorf("table %s has no fence trigger on this shard: install it (InstallTriggers) first", t)
				}
			}
			return nil
		})
	})
	if err != nil {
		verb := "fence"
		if op == "-" {
			verb = "unfence"
		}
		return fmt.Errorf("%s %d ranges of set %s: %w", verb, len(ranges), set.Name, err)
	}
	return nil
}

// Fenced returns the fenced ranges of a table on this shard.
func Fenced(ctx context.Context, pool *pgxpool.Pool, t tableset.Table) ([]ring.Range, int64, error) {
	rows, err := pool.Query(ctx, `
		SELECT coalesce(lower(x), -9223372036854775808), coalesce(upper(x), 9223372036854775807), lower_inf(x), upper_inf(x), f.epoch
		FROM reshard.fence f CROSS JOIN LATERAL unnest(f.ranges) x
		WHERE f.tbl = $1::regclass ORDER BY 1`, t.Quoted())
	if err != nil {
		return nil, 0, fmt.Errorf("read fences of %s: %w", t, err)
	}
	defer rows.Close()
	var out []ring.Range
	var epoch int64
	for rows.Next() {
		var lo, hi int64
		var loInf, hiInf bool
		if err := rows.Scan(&lo, &hi, &loInf, &hiInf, &epoch); err != nil {
			return nil, 0, err
		}
		// int8range is canonical [lo, hi): back to (lo-1, hi-1].
		r := ring.Range{Lo: ring.MinToken, Hi: ring.MaxToken}
		if !loInf {
			r.Lo = lo - 1
		}
		if !hiInf {
			r.Hi = hi - 1
		}
		out = append(out, r)
	}
	return out, epoch, rows.Err()
}

func inTx(ctx context.Context, pool *pgxpool.Pool, stmts []string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
}

// withLockRetry retries f while it fails on lock_timeout (55P03) or a
// deadlock (40P01), with a growing pause, until ctx ends.
func withLockRetry(ctx context.Context, f func() error) error {
	delay := 100 * time.Millisecond
	for {
		err := f()
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || (pe.Code != "55P03" && pe.Code != "40P01") {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up waiting for a lock: %v)", ctx.Err(), err)
		case <-time.After(delay):
		}
		if delay < 2*time.Second {
			delay *= 2
		}
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
