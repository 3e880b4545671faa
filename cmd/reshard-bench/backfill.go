package main

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// runBackfill measures, on the same data: the raw COPY pipes (as pglimits.sh
// does them), the backfill of a 20% token range without and with the token
// index, and a whole-table move next to pgcopydb.
func runBackfill(ctx context.Context, e *env, r *report) error {
	rows := float64(e.cfg.rows)
	t, err := shell(ctx, fmt.Sprintf(`%s -c '\copy users to stdout' | %s -c '\copy users from stdin'`, psql(e.src), psql(e.dst)))
	if err != nil {
		return fmt.Errorf("raw text pipe: %w", err)
	}
	pipe := rows / t.Seconds()
	r.add("copy_text_pipe_rows_per_s", pipe, "rows/s", fmt.Sprintf("psql \\copy to stdout | psql \\copy from stdin, %d rows, %.0f bytes/s, %s", e.cfg.rows, float64(e.tableBytes)/t.Seconds(), t.Round(time.Millisecond)))
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	t, err = shell(ctx, fmt.Sprintf(`%s -c 'copy users to stdout (format binary)' | %s -c 'copy users from stdin (format binary)'`, psql(e.src), psql(e.dst)))
	if err != nil {
		return fmt.Errorf("raw binary pipe: %w", err)
	}
	r.add("copy_binary_pipe_rows_per_s", rows/t.Seconds(), "rows/s", t.Round(time.Millisecond).String())

	set, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		return err
	}
	// The 20% range of pglimits.sh: from the bottom of the space, a fifth of it.
	fifth := uint64(math.MaxUint64 / 5)
	r20 := ring.Range{Lo: ring.MinToken, Hi: ring.MinToken + int64(fifth)}
	copyRange := func(name string, ranges []ring.Range, parallel, split int, order backfill.Order) (float64, backfill.Stats, error) {
		if err := e.truncateTarget(ctx); err != nil {
			return 0, backfill.Stats{}, err
		}
		st, err := backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: name, Set: set, Ranges: ranges,
			ChunkRows: e.cfg.chunkRows, Parallel: parallel, Split: split, Order: order})
		if err != nil {
			return 0, st, fmt.Errorf("backfill %s: %w", name, err)
		}
		var n int64
		if err := e.dstPool.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil || n != st.Rows {
			return 0, st, fmt.Errorf("backfill %s: target has %d rows, copy reported %d (%v)", name, n, st.Rows, err)
		}
		return float64(st.Rows) / st.Elapsed.Seconds(), st, nil
	}
	details := func(st backfill.Stats, extra string) string {
		return fmt.Sprintf("%d rows in %s, %d chunks of %d (%d by COPY), %s", st.Rows, st.Elapsed.Round(time.Millisecond), st.Chunks, e.cfg.chunkRows, st.FastChunks, extra)
	}

	v, st, err := copyRange("range20-noindex", []ring.Range{r20}, 1, 1, backfill.OrderAuto)
	if err != nil {
		return err
	}
	r.add("backfill_range20_noindex_rows_per_s", v, "rows/s", details(st, "paged by primary key"))
	r.add("backfill_range20_noindex_vs_text_pipe", v/pipe, "ratio", "goal >= 0.8")

	start := time.Now()
	if err := tableset.CreateTokenIndex(ctx, e.srcPool, set.Tables[0]); err != nil {
		return err
	}
	r.add("token_index_build_s", time.Since(start).Seconds(), "s", "CREATE INDEX CONCURRENTLY on the source")
	v, st, err = copyRange("range20-index", []ring.Range{r20}, 1, 1, backfill.OrderToken)
	if err != nil {
		return err
	}
	r.add("backfill_range20_index_rows_per_s", v, "rows/s", details(st, "paged by token through the index (forced; auto picks the pk scan at 20%)"))
	r.add("backfill_range20_index_vs_text_pipe", v/pipe, "ratio", "goal >= 0.8")

	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	whole, st, err := copyRange("whole", all, 1, 1, backfill.OrderAuto)
	if err != nil {
		return err
	}
	r.add("backfill_whole_table_rows_per_s", whole, "rows/s", details(st, "all ranges, one unit"))
	v, st, err = copyRange("whole-par2", all, 2, 2, backfill.OrderAuto)
	if err != nil {
		return err
	}
	r.add("backfill_whole_table_parallel2_rows_per_s", v, "rows/s", details(st, "all ranges split in 2, 2 in parallel"))
	whole = math.Max(whole, v)

	if _, err := exec.LookPath("pgcopydb"); err != nil {
		r.add("pgcopydb_table_data_rows_per_s", 0, "rows/s", "pgcopydb not installed (bench/run.sh installs it)")
		return nil
	}
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	t, err = shell(ctx, fmt.Sprintf(`pgcopydb copy table-data --dir %q --source %q --target %q --table-jobs 2 --not-consistent`,
		filepath.Join(e.dir, "pgcopydb"), e.src.DSN("postgres", false), e.dst.DSN("postgres", false)))
	if err != nil {
		return fmt.Errorf("pgcopydb: %w", err)
	}
	peer := rows / t.Seconds()
	r.add("pgcopydb_table_data_rows_per_s", peer, "rows/s", fmt.Sprintf("--table-jobs 2 --not-consistent, %s", t.Round(time.Millisecond)))
	r.add("backfill_whole_table_vs_pgcopydb", whole/peer, "ratio", "best whole-table figure above; goal >= 1.0")
	return nil
}
