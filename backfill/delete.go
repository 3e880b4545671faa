package backfill

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// DeleteRanges deletes every row of set whose key token is in ranges, in
// batches of batch rows (default 5000), each its own transaction under
// session_replication_role = replica (fences let it through), waiting on
// limiter (rows; nil = unlimited) before each batch. It serves rollback (the
// copied rows on the target) and cleanup (the moved rows on the source), and
// resumes by itself: it deletes whatever is still there. It returns the
// number of rows deleted.
func DeleteRanges(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, ranges []ring.Range, batch int, limiter *rate.Limiter) (int64, error) {
	if batch <= 0 {
		batch = 5000
	}
	ranges = ring.Normalize(ranges)
	var total int64
	for _, t := range set.Tables {
		stmt := deleteSQL(t, ranges, batch)
		for {
			if err := waitN(ctx, limiter, batch); err != nil {
				return total, err
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				return total, fmt.Errorf("delete ranges of %s: begin: %w", t, err)
			}
			n, err := func() (int64, error) {
				defer tx.Rollback(context.WithoutCancel(ctx))
				if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
					return 0, err
				}
				tag, err := tx.Exec(ctx, stmt)
				if err != nil {
					return 0, err
				}
				return tag.RowsAffected(), tx.Commit(ctx)
			}()
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

// deleteSQL deletes up to batch rows of t in ranges, found by one scan (the
// token index when there is one) and removed by their ctid.
func deleteSQL(t tableset.Table, ranges []ring.Range, batch int) string {
	return fmt.Sprintf("DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE %s LIMIT %d))",
		t.Quoted(), t.Quoted(), ring.Predicate(t.TokenSQL(""), ranges), batch)
}
