package backfill

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// ProbeFind times DeleteRanges' search on pool without deleting: its
// batches' statement with the DELETE left out (the same rows found the same
// way: the primary key walked from the first key, the rows outside ranges
// read and passed over), batch rows a batch, each its own read-only
// transaction, until maxTime has passed (at least one batch) or the rows
// in ranges run out. Nothing is locked beyond the table's ACCESS SHARE: it
// may run on a source the application writes. It returns the rows found
// and the time the batches took.
func ProbeFind(ctx context.Context, pool *pgxpool.Pool, t tableset.Table, ranges []ring.Range, batch int, maxTime time.Duration) (rows int64, elapsed time.Duration, err error) {
	if batch <= 0 {
		batch = 5000
	}
	ranges = ring.Normalize(ranges)
	var after []string
	start := time.Now()
	for {
		var n int64
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, setOwnAppName+pagingSettings); err != nil {
				return err
			}
			var last []string
			if err := tx.QueryRow(ctx, findSQL(t, ranges, after, batch)).Scan(&n, &last); err != nil {
				return err
			}
			after = last
			return nil
		})
		if err != nil {
			return rows, time.Since(start), fmt.Errorf("probe the cleanup's search of %s: %w", t, err)
		}
		rows += n
		if n < int64(batch) || time.Since(start) >= maxTime {
			return rows, time.Since(start), nil
		}
	}
}

// ProbeDelete times DeleteRanges' deletes alone in tx, on the rows of its
// table t (a probe's copy, every row of it in the moving ranges): batches of
// batch rows found first, untimed, then deleted by their ctid as
// DeleteRanges deletes them (a TID scan), at most maxRows in all. The
// caller rolls tx back.
func ProbeDelete(ctx context.Context, tx pgx.Tx, t tableset.Table, batch int, maxRows int64) (rows int64, elapsed time.Duration, err error) {
	if batch <= 0 {
		batch = 5000
	}
	find := fmt.Sprintf(`SELECT coalesce(array_agg(ctid::text), '{}') FROM (SELECT ctid FROM %s LIMIT %d) AS b`, t.Quoted(), batch)
	del := fmt.Sprintf(`DELETE FROM %s WHERE ctid = ANY ($1::text[]::tid[])`, t.Quoted())
	for rows < maxRows {
		var ctids []string
		if err := tx.QueryRow(ctx, find).Scan(&ctids); err != nil {
			return rows, elapsed, fmt.Errorf("probe the cleanup's deletes on %s: %w", t, err)
		}
		if len(ctids) == 0 {
			break
		}
		start := time.Now()
		tag, err := tx.Exec(ctx, del, ctids)
		elapsed += time.Since(start)
		if err != nil {
			return rows, elapsed, fmt.Errorf("probe the cleanup's deletes on %s: %w", t, err)
		}
		rows += tag.RowsAffected()
		if len(ctids) < batch {
			break
		}
	}
	return rows, elapsed, nil
}
