package backfill

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// DeleteRanges deletes every row of set whose key token is in ranges, in
// batches of batch rows (default 5000), each its own transaction under
// session_replication_role = replica (fences let it through), waiting on
// throttle (rows; nil = unlimited) before each batch. It serves rollback (the
// copied rows on the target) and cleanup (the moved rows on the source), and
// resumes by itself: it deletes whatever is still there. It returns the
// number of rows deleted.
//
// The batches walk the primary key, each starting after the last key of the
// one before, so the table is read once in all. Batches that each searched
// from the start read the rows deleted before them again (dead until
// vacuumed): the whole table once per batch, quadratic in the rows moved.
// The ranges are fenced while it runs, so no row appears behind the walk.
func DeleteRanges(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, ranges []ring.Range, batch int, throttle *Throttle) (int64, error) {
	if batch <= 0 {
		batch = 5000
	}
	ranges = ring.Normalize(ranges)
	var total int64
	for _, t := range set.Tables {
		var after []string
		for {
			if _, err := throttle.Wait(ctx, batch, 0); err != nil {
				return total, err
			}
			var n int64
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica; "+setOwnAppName+pagingSettings); err != nil {
					return err
				}
				var last []string
				if err := tx.QueryRow(ctx, deleteSQL(t, ranges, after, batch)).Scan(&n, &last); err != nil {
					return err
				}
				after = last
				return nil
			})
			if err != nil {
				return total, fmt.Errorf("delete ranges of %s: %w", t, err)
			}
			total += n
			if n < int64(batch) {
				break
			}
		}
	}
	return total, nil
}

// deleteSQL deletes up to batch rows of t in ranges whose primary key comes
// after after (nil: from the first), in primary-key order, and returns how
// many it deleted and the primary key of the last one as text.
func deleteSQL(t tableset.Table, ranges []ring.Range, after []string, batch int) string {
	return batchSQL(t, ranges, after, batch) + fmt.Sprintf(`,
d AS (DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM b)) RETURNING 1)
SELECT (SELECT count(*) FROM d), (SELECT reshard_key FROM b ORDER BY reshard_n DESC LIMIT 1)`, t.Quoted())
}

// findSQL is deleteSQL's search alone: the batch's rows found as deleteSQL
// finds them (the same CTE), counted instead of deleted.
func findSQL(t tableset.Table, ranges []ring.Range, after []string, batch int) string {
	return batchSQL(t, ranges, after, batch) + `
SELECT (SELECT count(*) FROM b), (SELECT reshard_key FROM b ORDER BY reshard_n DESC LIMIT 1)`
}

// batchSQL is the CTE b of a batch: up to batch rows of t in ranges after
// after, in primary-key order, with their ctid, key as text and rank.
func batchSQL(t tableset.Table, ranges []ring.Range, after []string, batch int) string {
	// Qualified: an output column named like a key column would otherwise
	// be what ORDER BY sorts by.
	pk := columnList("t", t.PK)
	where := ring.ScanPredicate(t.TokenSQL("t"), ranges)
	if after != nil {
		where += fmt.Sprintf(" AND (%s) > (%s)", pk, pkLiterals(t, after))
	}
	keys := make([]string, len(t.PK))
	for i, c := range t.PK {
		keys[i] = pgx.Identifier{"t", c}.Sanitize() + "::text"
	}
	return fmt.Sprintf(`WITH b AS (SELECT t.ctid, ARRAY[%s] AS reshard_key, row_number() OVER (ORDER BY %s) AS reshard_n FROM %s AS t WHERE %s ORDER BY %s LIMIT %d)`,
		strings.Join(keys, ", "), pk, t.Quoted(), where, pk, batch)
}
