package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/verify"
)

// runVerifyCPU measures what the verify of section large's move costs in
// CPU, with nothing else running: a source of -verifycpu-gb of orders, a
// target holding the moving fifth (copied by a binary COPY pipe), no
// writers, no stream. Section large's verify runs beside the router's
// writers and the held stream, and its CPU counts theirs; this one counts
// only the verify's (both servers' processes and this one), so its GiB per
// CPU-second does not depend on the machine's load. Beside it, in the same
// run: the checksum scan of ../shared/bench/pglimits.sh and one-side scans
// of candidate row hashes, each in its backend's CPU.
func runVerifyCPU(ctx context.Context, _ *env, r *report) error {
	cfg := r.cfg
	pg, err := devenv.NewPG()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "reshard-bench-verifycpu-")
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	e := &env{cfg: cfg, out: r.out, pg: pg, dir: dir}
	defer e.close()
	if e.src, e.dst, err = largeServers(ctx, pg, dir); err != nil {
		return err
	}
	rows, err := loadOrders(ctx, pg, e.src, int64(cfg.verifyCPUGB*1e9), func(f string, a ...any) { fmt.Fprintf(r.out, f+"\n", a...) })
	if err != nil {
		return err
	}
	if e.srcPool, err = pgxpool.New(ctx, e.src.DSN("postgres", false)); err != nil {
		return err
	}
	if e.dstPool, err = pgxpool.New(ctx, e.dst.DSN("postgres", false)); err != nil {
		return err
	}
	set, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "orders", KeyColumn: "id"}}}, "source")
	if err != nil {
		return err
	}
	rg := largeRange()
	pred := ring.Predicate(set.Tables[0].TokenSQL("orders"), []ring.Range{rg})
	if _, err := e.dstPool.Exec(ctx, ordersDDL+` WITH (autovacuum_enabled = false)`); err != nil {
		return err
	}
	start := time.Now()
	if err := copyPipe(ctx, e.srcPool, e.dstPool, `COPY (SELECT * FROM orders WHERE `+pred+` ORDER BY id) TO STDOUT (FORMAT binary)`, `COPY orders FROM STDIN (FORMAT binary)`); err != nil {
		return fmt.Errorf("copy the moving fifth to the target: %w", err)
	}
	for _, q := range []string{ordersIndexes[0], `VACUUM ANALYZE orders`} {
		if _, err := e.dstPool.Exec(ctx, q); err != nil {
			return fmt.Errorf("target: %s: %w", q, err)
		}
	}
	var srcBytes, moved, movedRows int64
	if err := e.srcPool.QueryRow(ctx, `SELECT pg_table_size('orders')`).Scan(&srcBytes); err != nil {
		return err
	}
	if err := e.dstPool.QueryRow(ctx, `SELECT pg_table_size('orders'), count(*) FROM orders`).Scan(&moved, &movedRows); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "target: the moving fifth, %d rows (%s), copied and indexed in %s\n", movedRows, gib(moved), time.Since(start).Round(time.Second))
	movedGiB := float64(moved) / (1 << 30)
	r.add("verifycpu_table_gib", float64(srcBytes)/(1<<30), "GiB", fmt.Sprintf("orders on the source, %d rows (pg_table_size: heap and TOAST); the target holds the moving fifth, %d rows, %s", rows, movedRows, gib(moved)))

	lr := &largeRun{r: r, e: e}
	// The verify, both sides: the better of two runs by CPU (the first
	// reads the table into the page cache).
	for _, par := range []int{2, 1} {
		var best phase
		var rep *verify.Report
		load := loadAvg()
		for range 2 {
			end, err := lr.meter(ctx)
			if err != nil {
				return err
			}
			rp, err := verify.Run(ctx, e.srcPool, e.dstPool, verify.Options{Set: set, Source: "source", Target: "target", Ranges: []ring.Range{rg}, Parallel: par})
			if err != nil {
				return fmt.Errorf("verify: %w", err)
			}
			if !rp.OK() || rp.Rows != movedRows {
				return fmt.Errorf("verify of an exact copy: %d mismatches, %d rows of %d", rp.Mismatches(), rp.Rows, movedRows)
			}
			p, err := end()
			if err != nil {
				return err
			}
			if best.took == 0 || p.cpuSeconds() < best.cpuSeconds() {
				best, rep = p, rp
			}
		}
		load += " to " + loadAvg()
		cpu := best.cpuSeconds()
		r.add(fmt.Sprintf("verifycpu_parallel%d_gib_per_cpu_hour", par), movedGiB/cpu*3600, "GiB/CPU-h",
			fmt.Sprintf("verify.Run of the moving fifth (%d rows, %d chunks of 50,000, %d workers, both sides read), the better of 2 runs: %.1f CPU-s (source %.1f, target %.1f, bench %.1f), %.4f GiB per CPU-second; no writers, no stream",
				rep.Rows, len(rep.Tables[0].Chunks), par, cpu, best.srcCPU.Seconds(), best.dstCPU.Seconds(), best.ownCPU.Seconds(), movedGiB/cpu))
		r.add(fmt.Sprintf("verifycpu_parallel%d_wall", par), movedGiB/best.took.Hours(), "GiB/h",
			fmt.Sprintf("the same run in %s wall clock, %.1f GiB/h per core; load average %s (an upper bound under load)", best.took.Round(time.Millisecond), movedGiB/best.took.Hours()/cores(), load))
	}

	// One side, one backend, no parallel workers: the CPU of a scan of
	// the target's table (the moving rows only) with each row hash.
	scan := func(pool *pgxpool.Pool, srv devenv.Server, sql string) (time.Duration, error) {
		var best time.Duration
		for range 2 {
			c0, err := treeCPU(srv)
			if err != nil {
				return 0, err
			}
			if _, err := pool.Exec(ctx, `SET max_parallel_workers_per_gather = 0; `+sql); err != nil {
				return 0, fmt.Errorf("%s: %w", sql, err)
			}
			c1, err := treeCPU(srv)
			if err != nil {
				return 0, err
			}
			if d := c1 - c0; best == 0 || d < best {
				best = d
			}
		}
		return best, nil
	}
	hashes := []struct{ name, expr, note string }{
		{"none", "0::int8", "the scan and aggregate alone"},
		{"verify", verify.RowHash(set.Tables[0], "t"), "verify's row hash (hash_record_extended, text form for numeric, float, jsonb)"},
		{"row_text", "hashtextextended(t::text, 0)", "the row's text hashed (pglimits.sh's checksum)"},
		{"row_md5", "('x' || left(md5(t::text), 16))::bit(64)::int8", "md5 of the row's text"},
		{"jsonb_text", `hashtextextended(t.attrs::text COLLATE "C", 0)`, "the jsonb column's text alone"},
		{"note", `hashtextextended(t.note COLLATE "C", 0)`, "the TOASTed note alone (detoasted)"},
	}
	for _, h := range hashes {
		d, err := scan(e.dstPool, e.dst, `SELECT count(*), bit_xor(h), sum(h) FROM (SELECT `+h.expr+` AS h FROM orders t OFFSET 0) s`)
		if err != nil {
			return err
		}
		r.add("verifycpu_hash_"+h.name+"_cpu_s", d.Seconds(), "CPU-s", fmt.Sprintf("%s: one scan of the target's %d rows (%s), one backend: %.2f µs a row", h.note, movedRows, gib(moved), d.Seconds()*1e6/float64(movedRows)))
	}
	// pglimits.sh's checksum scan, as it runs it (parallel workers
	// allowed), over the source's whole table.
	c0, err := treeCPU(e.src)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := e.srcPool.Exec(ctx, `SELECT count(*), bit_xor(hashtextextended(o::text, 0)) FROM orders o`); err != nil {
		return err
	}
	took := time.Since(t0)
	c1, err := treeCPU(e.src)
	if err != nil {
		return err
	}
	r.add("verifycpu_checksum_scan_source_rows_per_s", float64(rows)/took.Seconds(), "rows/s", fmt.Sprintf("count(*), bit_xor(hashtextextended(o::text,0)) over the source's orders (pglimits.sh's checksum_scan_source_rows_per_s), %s: %.2f GiB per CPU-s (%.1f CPU-s), one side only, load average %s",
		took.Round(time.Millisecond), float64(srcBytes)/(1<<30)/(c1-c0).Seconds(), (c1-c0).Seconds(), loadAvg()))
	return nil
}

// copyPipe runs a COPY TO on one pool into a COPY FROM on the other.
func copyPipe(ctx context.Context, src, dst *pgxpool.Pool, out, in string) error {
	sc, err := src.Acquire(ctx)
	if err != nil {
		return err
	}
	defer sc.Release()
	dc, err := dst.Acquire(ctx)
	if err != nil {
		return err
	}
	defer dc.Release()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := dc.Conn().PgConn().CopyFrom(ctx, pr, in)
		pr.CloseWithError(err)
		done <- err
	}()
	_, err = sc.Conn().PgConn().CopyTo(ctx, pw, out)
	pw.CloseWithError(err)
	if derr := <-done; err == nil {
		err = derr
	}
	return err
}
