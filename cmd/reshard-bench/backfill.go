package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// benchRepeats is how often the pipe and the 20% range copy run, taking
// turns: the 20% copy lasts about a second, and on a machine shared with
// other work one run is mostly noise (single runs gave ratios from 0.6 to
// 1.25). Both figures are medians of the same number of runs.
const benchRepeats = 3

// runBackfill measures, on the same data: the raw COPY pipes (as pglimits.sh
// does them), the backfill of a 20% token range without and with the token
// index, and a whole-table move next to pgcopydb.
func runBackfill(ctx context.Context, e *env, r *report) error {
	rows := float64(e.cfg.rows)
	textPipe := func() (time.Duration, error) {
		if err := e.truncateTarget(ctx); err != nil {
			return 0, err
		}
		t, err := shell(ctx, fmt.Sprintf(`%s -c '\copy users to stdout' | %s -c '\copy users from stdin'`, psql(e.src), psql(e.dst)))
		if err != nil {
			return 0, fmt.Errorf("raw text pipe: %w", err)
		}
		return t, nil
	}
	// A first, unreported pass reads the freshly loaded table once (hint
	// bits, cache), so that no measured run pays for it alone.
	if _, err := textPipe(); err != nil {
		return err
	}
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	t, err := shell(ctx, fmt.Sprintf(`%s -c 'copy users to stdout (format binary)' | %s -c 'copy users from stdin (format binary)'`, psql(e.src), psql(e.dst)))
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

	// The pipe and the 20% copy take turns; each figure is the median.
	var pipes, copies []float64
	var pairs []string
	var sts []backfill.Stats
	for i := range benchRepeats {
		t, err := textPipe()
		if err != nil {
			return err
		}
		pipes = append(pipes, rows/t.Seconds())
		v, s, err := copyRange(fmt.Sprintf("range20-noindex-%d", i), []ring.Range{r20}, 1, 1, backfill.OrderAuto)
		if err != nil {
			return err
		}
		sts = append(sts, s)
		copies = append(copies, v)
		pairs = append(pairs, fmt.Sprintf("%.0f/%.0f", v, pipes[i]))
	}
	pipe := median(pipes)
	v := median(copies)
	r.add("copy_text_pipe_rows_per_s", pipe, "rows/s", fmt.Sprintf("psql \\copy to stdout | psql \\copy from stdin, %d rows, %.0f bytes/s; median of %d runs %s",
		e.cfg.rows, float64(e.tableBytes)*pipe/rows, benchRepeats, strings.Join(fmtRates(pipes), ", ")))
	r.add("backfill_range20_noindex_rows_per_s", v, "rows/s", details(sts[medianAt(copies)], fmt.Sprintf("paged by primary key; median of %d runs %s", benchRepeats, strings.Join(fmtRates(copies), ", "))))
	r.add("backfill_range20_noindex_vs_text_pipe", v/pipe, "ratio", fmt.Sprintf("medians; goal >= 0.8; run by run (copy/pipe): %s", strings.Join(pairs, ", ")))

	// What an add-node moves (16 ranges, about 20 %), without the token
	// index: one primary-key scan for all the ranges, against the plan of
	// one unit per range (each range copied on its own, as before), which
	// reads the table once per range.
	moved, err := addNodeRanges()
	if err != nil {
		return err
	}
	v, st, err := copyRange("addnode-noindex", moved, 1, 1, backfill.OrderAuto)
	if err != nil {
		return err
	}
	r.add("backfill_addnode_ranges_noindex_rows_per_s", v, "rows/s", details(st, fmt.Sprintf("%d ranges in %d unit(s), paged by primary key", len(ring.Normalize(moved)), st.Units)))
	r.add("backfill_addnode_ranges_noindex_vs_text_pipe", v/pipe, "ratio", "the same goal as the 20% range: >= 0.8")
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	var perRange backfill.Stats
	for i, rg := range ring.Normalize(moved) {
		st, err := backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: fmt.Sprintf("addnode-perrange-%d", i), Set: set,
			Ranges: []ring.Range{rg}, ChunkRows: e.cfg.chunkRows})
		if err != nil {
			return fmt.Errorf("backfill per range: %w", err)
		}
		perRange.Rows += st.Rows
		perRange.Chunks += st.Chunks
		perRange.FastChunks += st.FastChunks
		perRange.Elapsed += st.Elapsed
	}
	r.add("backfill_addnode_ranges_unit_per_range_rows_per_s", float64(perRange.Rows)/perRange.Elapsed.Seconds(), "rows/s",
		details(perRange, "one unit per range, the plan before units grouped the ranges a table pages by primary key"))

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

	// The whole table, one unit and split in 2, and pgcopydb, taking turns.
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	_, havePeer := exec.LookPath("pgcopydb")
	var ones, twos, peers []float64
	var stOnes, stTwos []backfill.Stats
	for i := range benchRepeats {
		v, st, err := copyRange(fmt.Sprintf("whole-%d", i), all, 1, 1, backfill.OrderAuto)
		if err != nil {
			return err
		}
		ones, stOnes = append(ones, v), append(stOnes, st)
		v, st, err = copyRange(fmt.Sprintf("whole-par2-%d", i), all, 2, 2, backfill.OrderAuto)
		if err != nil {
			return err
		}
		twos, stTwos = append(twos, v), append(stTwos, st)
		if havePeer != nil {
			continue
		}
		if err := e.truncateTarget(ctx); err != nil {
			return err
		}
		t, err := shell(ctx, fmt.Sprintf(`pgcopydb copy table-data --dir %q --source %q --target %q --table-jobs 2 --not-consistent`,
			filepath.Join(e.dir, fmt.Sprintf("pgcopydb-%d", i)), e.src.DSN("postgres", false), e.dst.DSN("postgres", false)))
		if err != nil {
			return fmt.Errorf("pgcopydb: %w", err)
		}
		peers = append(peers, rows/t.Seconds())
	}
	runs := func(xs []float64) string {
		return fmt.Sprintf("median of %d runs %s", len(xs), strings.Join(fmtRates(xs), ", "))
	}
	r.add("backfill_whole_table_rows_per_s", median(ones), "rows/s", details(stOnes[medianAt(ones)], "all ranges, one unit; "+runs(ones)))
	r.add("backfill_whole_table_parallel2_rows_per_s", median(twos), "rows/s", details(stTwos[medianAt(twos)], "all ranges split in 2, 2 in parallel; "+runs(twos)))
	whole := math.Max(median(ones), median(twos))
	if havePeer != nil {
		r.add("pgcopydb_table_data_rows_per_s", 0, "rows/s", "pgcopydb not installed (bench/run.sh installs it)")
	} else {
		peer := median(peers)
		r.add("pgcopydb_table_data_rows_per_s", peer, "rows/s", "--table-jobs 2 --not-consistent; "+runs(peers))
		r.add("backfill_whole_table_vs_pgcopydb", whole/peer, "ratio", "best whole-table median above over pgcopydb's median; goal >= 1.0")
	}

	// CLEANUP: the moved rows deleted from the old owner, here the add-node
	// ranges from a full copy of the table (no token index on the target).
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	if _, err := shell(ctx, fmt.Sprintf(`%s -c 'copy users to stdout (format binary)' | %s -c 'copy users from stdin (format binary)'`, psql(e.src), psql(e.dst))); err != nil {
		return err
	}
	if _, err := e.dstPool.Exec(ctx, `VACUUM ANALYZE users`); err != nil {
		return err
	}
	start = time.Now()
	deleted, err := backfill.DeleteRanges(ctx, e.dstPool, set, moved, 5000, nil)
	if err != nil {
		return err
	}
	d := time.Since(start)
	r.add("cleanup_delete_addnode_ranges_rows_per_s", float64(deleted)/d.Seconds(), "rows/s",
		fmt.Sprintf("%d rows of the 16 add-node ranges deleted from the %d-row table in batches of 5000, %s", deleted, e.cfg.rows, d.Round(time.Millisecond)))
	return nil
}

// median of xs (not empty); sorts a copy.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianAt is the index of the median of xs (the lower one for an even
// count), so a median's details come from its own run.
func medianAt(xs []float64) int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(xs[a], xs[b]) })
	return idx[(len(xs)-1)/2]
}

func fmtRates(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.0f", x)
	}
	return out
}
