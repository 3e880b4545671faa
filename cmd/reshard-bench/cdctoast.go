package main

import (
	"context"
	"fmt"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// toastDDL is a table whose rows carry a TOASTed document (3.2 kB of hex,
// stored out of line) that its hot updates leave unchanged: pgoutput sends
// such a column as "unchanged", and the applier must keep the target's.
const toastDDL = `DROP TABLE IF EXISTS bench_toast; CREATE TABLE bench_toast (id bigint PRIMARY KEY, n bigint NOT NULL, doc text NOT NULL)`

// runCDCToast measures the apply of 200k single-row updates over 2,000 keys
// of bench_toast, each leaving the TOASTed doc unchanged, against the
// source's decoding of them (section cdc-hot, whose rows have no TOASTed
// column, is the same workload).
func runCDCToast(ctx context.Context, e *env, r *report) error {
	const keys = 2000
	n := cdcUpdates
	if _, err := e.srcPool.Exec(ctx, toastDDL+`; ALTER TABLE bench_toast SET (autovacuum_enabled = false);
		INSERT INTO bench_toast SELECT g, 0, (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 100) i) FROM generate_series(1, `+fmt.Sprint(keys)+`) g`); err != nil {
		return fmt.Errorf("create bench_toast on the source: %w", err)
	}
	if _, err := e.dstPool.Exec(ctx, toastDDL); err != nil {
		return fmt.Errorf("create bench_toast on the target: %w", err)
	}
	if _, err := shell(ctx, fmt.Sprintf(`%s -c 'copy bench_toast to stdout (format binary)' | %s -c 'copy bench_toast from stdin (format binary)'`, psql(e.src), psql(e.dst))); err != nil {
		return fmt.Errorf("copy bench_toast to the target: %w", err)
	}
	set, err := tableset.Introspect(ctx, e.dstPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "bench_toast", KeyColumn: "id"}}}, "target")
	if err != nil {
		return err
	}
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	names, err := e.cdcJoin(ctx, "bench_toast", set, all)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := e.singleRowUpdates(ctx, "bench_toast", "n = n + 1", n, keys); err != nil {
		return err
	}
	genRate := float64(n) / time.Since(start).Seconds()
	if err := e.mark(ctx, "bench-toast-end"); err != nil {
		return err
	}
	decodeRate, decodeT, err := e.peekRate(ctx, names, n)
	if err != nil {
		return err
	}
	res, err := applyUntilMarker(ctx, e.cdcOptions(names, set, all), "bench-toast-end", e)
	if err != nil {
		return err
	}
	const check = `SELECT sum(n)::text || '/' || md5(string_agg(doc, '' ORDER BY id)) FROM bench_toast`
	var a, b string
	if err := e.srcPool.QueryRow(ctx, check).Scan(&a); err != nil {
		return err
	}
	if err := e.dstPool.QueryRow(ctx, check).Scan(&b); err != nil {
		return err
	}
	if a != b {
		return fmt.Errorf("after the catch-up bench_toast differs: target %s, source %s (sum(n)/md5 of the docs)", b, a)
	}
	rate := float64(n) / res.elapsed.Seconds()
	r.add("cdc_toast_generate_txns_per_s", genRate, "txn/s", fmt.Sprintf("%d single-row UPDATE transactions over %d keys of bench_toast, each leaving its 3.2 kB TOASTed doc unchanged, 2 sessions, synchronous_commit off", n, keys))
	r.add("pgoutput_decode_toast_changes_per_s", decodeRate, "changes/s", fmt.Sprintf("pg_logical_slot_peek_binary_changes of those transactions, %s", decodeT.Round(time.Millisecond)))
	r.add("cdc_toast_apply_changes_per_s", rate, "changes/s", fmt.Sprintf("caught up in %s; %s; apply CPU %.1f µs per change; target equal to the source", res.elapsed.Round(time.Millisecond), res.cpu, perChange(res.applyCPU(), n)))
	r.add("cdc_toast_apply_vs_decode", rate/decodeRate, "ratio", "cdc_toast_apply_changes_per_s / pgoutput_decode_toast_changes_per_s, same run")
	if err := e.cdcLeave(ctx, names); err != nil {
		return err
	}
	_, err = e.srcPool.Exec(ctx, `DROP TABLE bench_toast`)
	return err
}
