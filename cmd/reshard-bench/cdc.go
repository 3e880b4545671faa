package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// cdcUpdates is the number of single-row source transactions of the apply
// figure (issue 4: 200k).
const cdcUpdates = 200_000

// applyAppName names the applier's target session, so its backend can be
// found in pg_stat_activity (CPU accounting).
const applyAppName = "reshard_bench_apply"

// runCDC measures the applier: changes/s for many small source transactions
// against the source's own single-statement UPDATE of as many rows, and the
// worker's peak RSS while it applies one source transaction of the whole
// table (in a child process, so the figure is the applier's alone). The
// catch-up and its ceilings are measured in -cdc-rounds rounds, and each
// ratio is the median of the rounds' own: on a 2-core machine one round's
// ratio moved by a third from one run to the next (0.71-1.36 against the
// source's generate rate, 0.81-1.46 against the walsender's CPU), from the
// machine rather than the code.
func runCDC(ctx context.Context, e *env, r *report) error {
	restore, err := e.noSourceAutovacuum(ctx)
	if err != nil {
		return err
	}
	defer restore()
	n := min(cdcUpdates, e.cfg.rows)
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}

	// The source's own rate, as pglimits.sh measures it: once before the
	// apply and once after it (load from other work changes within a run),
	// the figure is their mean.
	sourceUpdate := func() (float64, error) {
		start := time.Now()
		if _, err := e.srcPool.Exec(ctx, `UPDATE users SET balance = balance + 1 WHERE id <= $1`, n); err != nil {
			return 0, fmt.Errorf("source update: %w", err)
		}
		return float64(n) / time.Since(start).Seconds(), nil
	}
	base0, err := sourceUpdate()
	if err != nil {
		return err
	}

	set, err := e.cdcTarget(ctx)
	if err != nil {
		return err
	}
	var rounds []catchUp
	var resArray applyResult
	for i := range max(e.cfg.cdcRounds, 1) {
		// In the first round a second slot sees the same transactions, to
		// be applied with every flush as text[] arrays.
		var namesArray cdc.Names
		c, err := e.catchUpRound(ctx, set, "bench_small", "", i, n, n, func() (err error) {
			if i == 0 {
				namesArray, err = e.cdcJoin(ctx, "bench_small_array", set, all)
			}
			return err
		}, nil)
		if err != nil {
			return err
		}
		rounds = append(rounds, c)
		if i > 0 {
			continue
		}
		optsArray := e.cdcOptions(namesArray, set, all)
		optsArray.StageMinRows = math.MaxInt32
		if resArray, err = applyUntilMarker(ctx, optsArray, c.marker, e); err != nil {
			return err
		}
		if err := e.sameBalances(ctx); err != nil {
			return err
		}
		if err := e.cdcLeave(ctx, namesArray); err != nil {
			return err
		}
	}
	up, err := e.targetUpsertCeiling(ctx, n)
	if err != nil {
		return err
	}
	base1, err := sourceUpdate()
	if err != nil {
		return err
	}
	// No slot saw this second baseline: the whole-table transaction below
	// rewrites every row on the target, and the check after it covers them.
	base := (base0 + base1) / 2
	nr := len(rounds)
	gen, decode := roundMedian(rounds, func(c catchUp) float64 { return c.gen }), roundMedian(rounds, func(c catchUp) float64 { return c.decode })
	rate := roundMedian(rounds, applyRate)
	m := rounds[rate.at] // the round of the median apply
	r.add("cdc_generate_txns_per_s", gen.value, "txn/s",
		fmt.Sprintf("%d single-row UPDATE transactions on distinct keys, 2 sessions, synchronous_commit off (the rate the source produces them); median of %d rounds: %s", n, nr, gen.list))
	r.add("pgoutput_decode_changes_per_s", decode.value, "changes/s",
		fmt.Sprintf("pg_logical_slot_peek_binary_changes of the %d transactions: the source's decoding ceiling; median of %d rounds: %s", n, nr, decode.list))
	r.add("source_update_rows_per_s", base, "rows/s", fmt.Sprintf("UPDATE users SET balance = balance + 1 WHERE id <= %d, one statement; mean of %.0f (before the applies) and %.0f (after)", n, base0, base1))
	r.add("cdc_apply_changes_per_s", m.rate, "changes/s", fmt.Sprintf("%d single-row source transactions caught up in %s (the median of %d rounds: %s); %s",
		n, m.res.elapsed.Round(time.Millisecond), nr, rate.list, m.res.cpu))
	vsGen := roundMedian(rounds, func(c catchUp) float64 { return c.rate / c.gen })
	r.add("cdc_apply_vs_generate", vsGen.value, "ratio", "cdc_apply_changes_per_s / cdc_generate_txns_per_s on distinct keys, each round's own: catch-up converges under the peak write load when > 1; goal >= 1.2; median of rounds: "+vsGen.list)
	r.add("cdc_apply_cpu_per_change_us", perChange(m.res.applyCPU(), n), "µs", fmt.Sprintf("applier %.1f + target backend %.1f µs CPU per change (the median apply's round)",
		perChange(m.res.applierCPU, n), perChange(m.res.targetCPU, n)))
	r.add("cdc_source_cpu_per_change_us", perChange(m.res.sourceCPU, n), "µs", "the source's CPU per change during the same apply (every process of the server: the SQL peeks or walsender that decode, background writers)")
	ws := roundMedian(rounds, func(c catchUp) float64 { return perChange(c.stream.walsenderCPU, n) })
	r.add("cdc_walsender_cpu_per_change_us", ws.value, "µs",
		fmt.Sprintf("a walsender streaming the same transactions to a reader that drops them: what decoding costs the source through START_REPLICATION; median of rounds: %s", ws.list))
	vsWs := roundMedian(rounds, func(c catchUp) float64 { return float64(c.res.applyCPU()) / float64(c.stream.walsenderCPU) })
	r.add("cdc_apply_cpu_vs_walsender", vsWs.value, "ratio", "cdc_apply_cpu_per_change_us / cdc_walsender_cpu_per_change_us, each round's own; goal <= 1; median of rounds: "+vsWs.list)
	r.add("cdc_apply_cpu_vs_source", float64(m.res.applyCPU())/float64(m.res.sourceCPU), "ratio", "cdc_apply_cpu_per_change_us / cdc_source_cpu_per_change_us: the apply against what the source spent on it")
	r.add("cdc_apply_array_changes_per_s", float64(n)/resArray.elapsed.Seconds(), "changes/s", fmt.Sprintf("the first round's transactions from a second slot, every flush as text[] arrays (StageMinRows off), %s; %s; apply CPU %.1f µs per change",
		resArray.elapsed.Round(time.Millisecond), resArray.cpu, perChange(resArray.applyCPU(), n)))
	r.add("cdc_apply_vs_source_update", m.rate/base, "ratio", "goal >= 1.5")
	r.add("target_upsert_rows_per_s", up, "rows/s", fmt.Sprintf("the applier's statement (upsert from text[] of 2000 rows) over the same %d rows, in one target session", n))
	r.add("cdc_ceiling_decode_vs_source_update", decode.value/base, "ratio", "pgoutput_decode_changes_per_s / source_update_rows_per_s: no applier can beat the walsender's decoding")
	r.add("cdc_ceiling_target_vs_source_update", up/base, "ratio", "target_upsert_rows_per_s / source_update_rows_per_s: nor the target's own write of the rows")

	// One source transaction of the whole table, applied by a child process.
	names, err := e.cdcJoin(ctx, "bench_big", set, all)
	if err != nil {
		return err
	}
	start := time.Now()
	tag, err := e.srcPool.Exec(ctx, `UPDATE users SET balance = balance + 1`)
	if err != nil {
		return fmt.Errorf("source update of the whole table: %w", err)
	}
	big := tag.RowsAffected()
	r.add("source_update_whole_table_rows_per_s", float64(big)/time.Since(start).Seconds(), "rows/s", fmt.Sprintf("UPDATE users SET balance = balance + 1, %d rows in one transaction, %s", big, time.Since(start).Round(time.Millisecond)))
	if err := e.mark(ctx, "bench-big-end"); err != nil {
		return err
	}
	child, err := e.childApply(ctx, childConfig{Options: e.cdcOptions(names, set, all), Marker: "bench-big-end"})
	if err != nil {
		return err
	}
	r.add("cdc_apply_big_txn_peak_rss_mb", float64(child.VmHWMKiB)/1024, "MB",
		fmt.Sprintf("VmHWM of a child process applying one %d-row source transaction (FlushRows %d); goal <= 256", big, child.FlushRows))
	r.add("cdc_apply_big_txn_changes_per_s", float64(big)/child.Seconds, "changes/s", fmt.Sprintf("the same child, %.1fs from start to the marker", child.Seconds))
	if err := e.sameBalances(ctx); err != nil {
		return err
	}
	return e.cdcLeave(ctx, names)
}

// cdcTarget makes the target a copy of the source (nothing writes
// meanwhile), so that after a catch-up both must be equal, and returns the
// table set of users.
func (e *env) cdcTarget(ctx context.Context) (tableset.Set, error) {
	if err := e.truncateTarget(ctx); err != nil {
		return tableset.Set{}, err
	}
	if _, err := shell(ctx, fmt.Sprintf(`%s -c 'copy users to stdout (format binary)' | %s -c 'copy users from stdin (format binary)'`, psql(e.src), psql(e.dst))); err != nil {
		return tableset.Set{}, fmt.Errorf("copy users to the target: %w", err)
	}
	if _, err := e.dstPool.Exec(ctx, `VACUUM ANALYZE users`); err != nil {
		return tableset.Set{}, err
	}
	return tableset.Introspect(ctx, e.dstPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "target")
}

// noSourceAutovacuum turns autovacuum off for the source's users table until
// restore: the source's CPU during an apply is taken as all its processes',
// and an autovacuum of the updated table is not decoding.
func (e *env) noSourceAutovacuum(ctx context.Context) (restore func(), err error) {
	if _, err := e.srcPool.Exec(ctx, `ALTER TABLE users SET (autovacuum_enabled = false)`); err != nil {
		return nil, err
	}
	return func() {
		_, _ = e.srcPool.Exec(context.WithoutCancel(ctx), `ALTER TABLE users RESET (autovacuum_enabled)`)
	}, nil
}

// runCDCHot measures the apply of 200k single-row updates over 2,000 keys
// against the source's decoding of the same transactions, in -cdc-rounds
// rounds (as runCDC).
func runCDCHot(ctx context.Context, e *env, r *report) error {
	restore, err := e.noSourceAutovacuum(ctx)
	if err != nil {
		return err
	}
	defer restore()
	const keys = 2000
	set, err := e.cdcTarget(ctx)
	if err != nil {
		return err
	}
	n := cdcUpdates
	var rounds []catchUp
	var toClient int
	var toClientT time.Duration
	for i := range max(e.cfg.cdcRounds, 1) {
		c, err := e.catchUpRound(ctx, set, "bench_hot", "hot", i, n, keys, nil, func(names cdc.Names) (err error) {
			if i == 0 {
				toClient, toClientT, err = e.peekToClient(ctx, names)
			}
			return err
		})
		if err != nil {
			return err
		}
		rounds = append(rounds, c)
	}
	nr := len(rounds)
	streamRate := func(c catchUp) float64 { return float64(n) / c.stream.elapsed.Seconds() }
	gen, decode := roundMedian(rounds, func(c catchUp) float64 { return c.gen }), roundMedian(rounds, func(c catchUp) float64 { return c.decode })
	rate, stream := roundMedian(rounds, applyRate), roundMedian(rounds, streamRate)
	m, st := rounds[rate.at], rounds[stream.at]
	r.add("cdc_hot_generate_txns_per_s", gen.value, "txn/s", fmt.Sprintf("%d single-row UPDATE transactions over %d keys, 2 sessions, synchronous_commit off; median of %d rounds: %s", n, keys, nr, gen.list))
	r.add("pgoutput_decode_hot_changes_per_s", decode.value, "changes/s", "pg_logical_slot_peek_binary_changes of those transactions; median of rounds: "+decode.list)
	r.add("cdc_hot_apply_changes_per_s", m.rate, "changes/s", fmt.Sprintf("caught up in %s (the median of %d rounds: %s); %s; apply CPU %.1f µs per change",
		m.res.elapsed.Round(time.Millisecond), nr, rate.list, m.res.cpu, perChange(m.res.applyCPU(), n)))
	r.add("pgoutput_peek_to_client_hot_changes_per_s", float64(n)/toClientT.Seconds(), "changes/s",
		fmt.Sprintf("the first round's peek with every message sent to this program over SQL (%d messages, BEGIN and COMMIT included, %s), read and dropped", toClient, toClientT.Round(time.Millisecond)))
	r.add("pgoutput_stream_hot_changes_per_s", streamRate(st), "changes/s",
		fmt.Sprintf("the same transactions streamed by a walsender (START_REPLICATION, reads coalesced as the applier's) to a reader that drops them, %s (the median of rounds: %s); walsender CPU %.1f s, %.1f µs per change: the streaming protocol's ceiling",
			st.stream.elapsed.Round(time.Millisecond), stream.list, st.stream.walsenderCPU.Seconds(), perChange(st.stream.walsenderCPU, n)))
	vsDecode := roundMedian(rounds, func(c catchUp) float64 { return c.rate / c.decode })
	r.add("cdc_hot_apply_vs_decode", vsDecode.value, "ratio", "cdc_hot_apply_changes_per_s / pgoutput_decode_hot_changes_per_s, each round's own; goal >= 0.8; median of rounds: "+vsDecode.list)
	vsStream := roundMedian(rounds, func(c catchUp) float64 { return c.rate / streamRate(c) })
	r.add("cdc_hot_apply_vs_stream", vsStream.value, "ratio", "cdc_hot_apply_changes_per_s / pgoutput_stream_hot_changes_per_s, each round's own: the apply against the walsender's own streaming rate; median of rounds: "+vsStream.list)
	return nil
}

// runCDCLong measures a catch-up that takes many SQL reads, as one after a
// long copy does: 300k single-row transactions, 15 rounds of one update of
// each of 20k keys, with a CHECKPOINT after each round (each logs the running transactions, as the source
// does every 15 s of a longer backlog, so a slot's restart position can
// follow its reads) and reads of 4 MB. One slot is caught up reading a
// temporary copy ahead of the applier (the default), another peeking
// the slot itself one read at a time (cdc.Options.PeekInPlace, what a source
// without a spare slot gets), each twice.
func runCDCLong(ctx context.Context, e *env, r *report) error {
	restore, err := e.noSourceAutovacuum(ctx)
	if err != nil {
		return err
	}
	defer restore()
	const n, round = 300_000, 20_000
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	set, err := e.cdcTarget(ctx)
	if err != nil {
		return err
	}
	// Four slots see the same transactions, applied in place, ahead, ahead,
	// in place: an apply runs faster after another (the target's pages are
	// warm), so each way is measured once in each position.
	var slots [4]cdc.Names
	for i, move := range []string{"bench_long_in_place_1", "bench_long_ahead_1", "bench_long_ahead_2", "bench_long_in_place_2"} {
		if slots[i], err = e.cdcJoin(ctx, move, set, all); err != nil {
			return err
		}
	}
	for i := 0; i < n; i += round {
		if err := e.smallTransactions(ctx, round, min(round, e.cfg.rows)); err != nil {
			return err
		}
		if _, err := e.srcPool.Exec(ctx, `CHECKPOINT`); err != nil {
			return err
		}
	}
	if err := e.mark(ctx, "bench-long-end"); err != nil {
		return err
	}
	apply := func(names cdc.Names, inPlace bool) (applyResult, error) {
		opts := e.cdcOptions(names, set, all)
		opts.PeekBytes, opts.PeekInPlace = 4<<20, inPlace
		res, err := applyUntilMarker(ctx, opts, "bench-long-end", e)
		if err != nil {
			return res, err
		}
		if err := e.sameBalances(ctx); err != nil {
			return res, err
		}
		return res, e.cdcLeave(ctx, names)
	}
	var res [4]applyResult
	for i, names := range slots {
		if res[i], err = apply(names, i == 0 || i == 3); err != nil {
			return err
		}
	}
	resInPlace, resAhead := res[0], res[1]
	resInPlace.elapsed = (res[0].elapsed + res[3].elapsed) / 2
	resAhead.elapsed = (res[1].elapsed + res[2].elapsed) / 2
	rateAhead, rateInPlace := float64(n)/resAhead.elapsed.Seconds(), float64(n)/resInPlace.elapsed.Seconds()
	r.add("cdc_long_apply_changes_per_s", rateAhead, "changes/s", fmt.Sprintf("%d single-row transactions (rounds of one update of each of %d keys, a CHECKPOINT after each), reads of 4 MB, reading a copy of the slot ahead: caught up in %s and %s (2nd and 3rd of four applies); the first: %s",
		n, round, res[1].elapsed.Round(time.Millisecond), res[2].elapsed.Round(time.Millisecond), res[1].cpu))
	r.add("cdc_long_in_place_apply_changes_per_s", rateInPlace, "changes/s", fmt.Sprintf("the same, each slot peeked in place one read at a time: caught up in %s and %s (1st and 4th); the first: %s",
		res[0].elapsed.Round(time.Millisecond), res[3].elapsed.Round(time.Millisecond), res[0].cpu))
	r.add("cdc_long_ahead_vs_in_place", rateAhead/rateInPlace, "ratio", "cdc_long_apply_changes_per_s / cdc_long_in_place_apply_changes_per_s: what reading ahead buys when a catch-up takes many reads")
	return nil
}

// peekRate decodes a slot's pending changes on the source (no network, no
// apply): the walsender's ceiling.
func (e *env) peekRate(ctx context.Context, names cdc.Names, n int) (float64, time.Duration, error) {
	if err := e.slotReleased(ctx, names.Slot); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	var decoded int64
	if err := e.srcPool.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)`,
		names.Slot, names.Publication).Scan(&decoded); err != nil {
		return 0, 0, fmt.Errorf("peek slot: %w", err)
	}
	t := time.Since(start)
	return float64(n) / t.Seconds(), t, nil
}

// slotReleased waits up to 10 s for slot to be free: the replication
// session that created or streamed it may still be exiting on a busy
// machine, and a peek of a slot in use fails (SQLSTATE 55006).
func (e *env) slotReleased(ctx context.Context, slot string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var active bool
		if err := e.srcPool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err != nil {
			return fmt.Errorf("read slot %s: %w", slot, err)
		}
		if !active {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s still in use after 10s", slot)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stageFlushSizes are the flush sizes at which stageThreshold compares the
// staged path with the text[] path.
var stageFlushSizes = []int{16, 256, 1000, 2000}

// runCDCStage measures where the staged path starts to pay: the same
// backlog applied with every flush FlushRows operations, by one path or the
// other, for several flush sizes (cdc.DefaultStageMinRows comes from here).
func runCDCStage(ctx context.Context, e *env, r *report) error {
	n := min(40_000, e.cfg.rows)
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	set, err := e.cdcTarget(ctx)
	if err != nil {
		return err
	}
	type run struct {
		names    cdc.Names
		flush    int
		stageMin int
	}
	var runs []run
	for _, f := range stageFlushSizes {
		for _, staged := range []bool{true, false} {
			rn := run{flush: f, stageMin: 1}
			if !staged {
				rn.stageMin = math.MaxInt32
			}
			var err error
			if rn.names, err = e.cdcJoin(ctx, fmt.Sprintf("bench_thr_%d_%v", f, staged), set, all); err != nil {
				return err
			}
			runs = append(runs, rn)
		}
	}
	if err := e.smallTransactions(ctx, n, n); err != nil {
		return err
	}
	if err := e.mark(ctx, "bench-thr-end"); err != nil {
		return err
	}
	res := make([]applyResult, len(runs))
	for i, rn := range runs {
		opts := e.cdcOptions(rn.names, set, all)
		opts.FlushRows, opts.StageMinRows = rn.flush, rn.stageMin
		var err error
		if res[i], err = applyUntilMarker(ctx, opts, "bench-thr-end", e); err != nil {
			return err
		}
		if err := e.cdcLeave(ctx, rn.names); err != nil {
			return err
		}
	}
	for i := 0; i < len(runs); i += 2 {
		st, ar := res[i], res[i+1]
		r.add(fmt.Sprintf("cdc_flush_%d_staged_vs_array_cpu", runs[i].flush), float64(st.applyCPU())/float64(ar.applyCPU()), "ratio",
			fmt.Sprintf("apply CPU (applier + target backend) per change with flushes of %d rows: staged %.1f µs, text[] %.1f µs; elapsed %s vs %s (%d changes); < 1: staging pays",
				runs[i].flush, perChange(st.applyCPU(), n), perChange(ar.applyCPU(), n), st.elapsed.Round(time.Millisecond), ar.elapsed.Round(time.Millisecond), n))
	}
	return e.sameBalances(ctx)
}

// targetUpsertCeiling is the rate of the applier's own write, alone: the
// same upsert from text arrays of 2000 rows (cdc's former FlushRows), over rows
// 1..n of the target, with the arrays built beforehand.
func (e *env) targetUpsertCeiling(ctx context.Context, n int) (float64, error) {
	conn, err := e.dstPool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS ceiling_batches AS
		SELECT (id - 1) / 2000 AS bn, array_agg(id::text) a0, array_agg(email) a1, array_agg(name) a2, array_agg(balance::text) a3,
			array_agg(payload) a4, array_agg(updated_at::text) a5
		FROM users WHERE id <= $1 GROUP BY 1`, n); err != nil {
		return 0, err
	}
	start := time.Now()
	_, err = conn.Exec(ctx, `DO $$ DECLARE b record; BEGIN FOR b IN SELECT * FROM ceiling_batches ORDER BY bn LOOP
		EXECUTE 'INSERT INTO users AS t (id, email, name, balance, payload, updated_at)
			SELECT u.v0::bigint, u.v1::text, u.v2::text, u.v3::bigint, u.v4::text, u.v5::timestamptz
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(v0, v1, v2, v3, v4, v5)
			ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email, name = EXCLUDED.name, balance = EXCLUDED.balance,
				payload = EXCLUDED.payload, updated_at = EXCLUDED.updated_at WHERE true'
			USING b.a0, b.a1, b.a2, b.a3, b.a4, b.a5;
	END LOOP; END $$`)
	if err != nil {
		return 0, fmt.Errorf("target upsert ceiling: %w", err)
	}
	t := time.Since(start)
	_, err = conn.Exec(ctx, `DROP TABLE ceiling_batches`)
	return float64(n) / t.Seconds(), err
}

// cdcJoin creates a stream's publication and slot on the source (JOINING).
func (e *env) cdcJoin(ctx context.Context, move string, set tableset.Set, ranges []ring.Range) (cdc.Names, error) {
	names, _, err := e.cdcJoinAt(ctx, move, set, ranges)
	return names, err
}

// cdcJoinAt is cdcJoin, with the slot's consistent point: where a stream
// of the copy that follows starts.
func (e *env) cdcJoinAt(ctx context.Context, move string, set tableset.Set, ranges []ring.Range) (cdc.Names, pglogrepl.LSN, error) {
	names, err := cdc.NamesFor(move)
	if err != nil {
		return names, 0, err
	}
	if err := cdc.CreatePublication(ctx, e.srcPool, names.Publication, set, ranges); err != nil {
		return names, 0, err
	}
	rc, err := pgconn.Connect(ctx, e.src.DSN("postgres", false)+"&replication=database")
	if err != nil {
		return names, 0, err
	}
	defer rc.Close(context.WithoutCancel(ctx))
	l0, _, err := cdc.CreateSlot(ctx, rc, names.Slot)
	return names, l0, err
}

// cdcLeave drops a stream's slot and publication on the source and its
// replication origin on the target (the target has max_replication_slots
// origin slots, and the threshold runs use eight streams).
func (e *env) cdcLeave(ctx context.Context, names cdc.Names) error {
	if err := cdc.DropSlot(ctx, e.srcPool, names.Slot); err != nil {
		return err
	}
	if err := cdc.DropOrigin(ctx, e.dstPool, names.Origin); err != nil {
		return err
	}
	return cdc.DropPublication(ctx, e.srcPool, names.Publication)
}

func (e *env) cdcOptions(names cdc.Names, set tableset.Set, ranges []ring.Range) cdc.Options {
	return cdc.Options{Move: "bench", SourceReplicationDSN: e.src.DSN("postgres", false) + "&replication=database",
		Slot: names.Slot, Publication: names.Publication, Origin: names.Origin,
		TargetDSN: e.dst.DSN("postgres", false) + "&application_name=" + applyAppName, Set: set, Ranges: ranges,
		PeekCatchUpBytes: e.cfg.sqlCatchUp}
}

// smallTransactions runs n single-row UPDATE transactions on ids 1..keys
// of users (round robin) from two sessions (a COMMIT per row;
// synchronous_commit off only makes the generator faster, the WAL and the
// stream are the same).
func (e *env) smallTransactions(ctx context.Context, n, keys int) error {
	return e.singleRowUpdates(ctx, "users", "balance = balance + 1", n, keys)
}

// singleRowUpdates is smallTransactions on table, setting set.
func (e *env) singleRowUpdates(ctx context.Context, table, set string, n, keys int) error {
	g, gctx := errgroup.WithContext(ctx)
	const sessions = 2
	for i := range sessions {
		g.Go(func() error {
			conn, err := pgx.Connect(gctx, e.src.DSN("postgres", false))
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(gctx))
			if _, err := conn.Exec(gctx, `SET synchronous_commit = off`); err != nil {
				return err
			}
			// One statement: a multi-statement string would run as one
			// transaction block, where COMMIT is refused.
			_, err = conn.Exec(gctx, fmt.Sprintf(`DO $$ BEGIN FOR i IN %d..%d BY %d LOOP
					UPDATE %s SET %s WHERE id = (i - 1) %% %d + 1; COMMIT;
				END LOOP; END $$`, i+1, n, sessions, pgx.Identifier{table}.Sanitize(), set, keys))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("single-row updates of %s: %w", table, err)
	}
	return nil
}

// mark emits the marker the applier drains to: the end of the workload.
func (e *env) mark(ctx context.Context, payload string) error {
	_, err := e.srcPool.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, cdc.MarkerPrefix, payload)
	return err
}

// sameBalances checks the target against the source after a catch-up.
func (e *env) sameBalances(ctx context.Context) error {
	var a, b int64
	if err := e.srcPool.QueryRow(ctx, `SELECT sum(balance) FROM users`).Scan(&a); err != nil {
		return err
	}
	if err := e.dstPool.QueryRow(ctx, `SELECT sum(balance) FROM users`).Scan(&b); err != nil {
		return err
	}
	if a != b {
		return fmt.Errorf("after the catch-up the target's sum(balance) is %d, the source's %d", b, a)
	}
	return nil
}

// catchUp is one round of a catch-up measurement: n new single-row source
// transactions on a fresh slot, the source's decoding of them by one peek
// and by a walsender (the ceilings), then their apply.
type catchUp struct {
	marker      string
	gen, decode float64 // txn/s generated, changes/s decoded by one peek
	stream      streamResult
	res         applyResult
	rate        float64 // changes/s applied
}

// catchUpRound runs round i (0-based) of a catch-up measurement on a slot
// named prefix (and the round's number after the first): it joins, calls
// joined (nil: none; another slot may join to see the same transactions), generates
// n single-row updates over keys keys, measures the peek and the
// walsender, calls beforeApply (nil: none), then applies them and checks
// the target. The first round is the one profiled (-cdc-profile, with
// profile as the file's suffix).
func (e *env) catchUpRound(ctx context.Context, set tableset.Set, prefix, profile string, i, n, keys int, joined func() error, beforeApply func(cdc.Names) error) (catchUp, error) {
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	slot, marker := prefix, strings.ReplaceAll(prefix, "_", "-")+"-end"
	if i > 0 {
		slot, marker = fmt.Sprintf("%s_%d", slot, i+1), fmt.Sprintf("%s-%d", marker, i+1)
	}
	c := catchUp{marker: marker}
	names, err := e.cdcJoin(ctx, slot, set, all)
	if err != nil {
		return c, err
	}
	if joined != nil {
		if err := joined(); err != nil {
			return c, err
		}
	}
	start := time.Now()
	if err := e.smallTransactions(ctx, n, keys); err != nil {
		return c, err
	}
	c.gen = float64(n) / time.Since(start).Seconds()
	if err := e.mark(ctx, marker); err != nil {
		return c, err
	}
	// Decoding alone (no network, no apply): the walsender's ceiling.
	if c.decode, _, err = e.peekRate(ctx, names, n); err != nil {
		return c, err
	}
	if c.stream, err = e.streamCeiling(ctx, names, marker); err != nil {
		return c, err
	}
	// The updates just before leave dirty buffers that the source's
	// checkpointer and background writer would flush during the apply,
	// where the source's CPU is measured as all its processes.
	if _, err := e.srcPool.Exec(ctx, `CHECKPOINT`); err != nil {
		return c, err
	}
	if beforeApply != nil {
		if err := beforeApply(names); err != nil {
			return c, err
		}
	}
	stop := func() {}
	if i == 0 {
		if stop, err = e.startCDCProfile(profile); err != nil {
			return c, err
		}
	}
	c.res, err = applyUntilMarker(ctx, e.cdcOptions(names, set, all), marker, e)
	stop()
	if err != nil {
		return c, err
	}
	c.rate = float64(n) / c.res.elapsed.Seconds()
	if err := e.sameBalances(ctx); err != nil {
		return c, err
	}
	return c, e.cdcLeave(ctx, names)
}

// medianOf is a figure's median over rounds, the round it comes from
// (medianAt: the lower one of an even count) and every round's value, as
// the report formats them.
type medianOf struct {
	value float64
	at    int
	list  string
}

func roundMedian(rounds []catchUp, f func(catchUp) float64) medianOf {
	xs := make([]float64, len(rounds))
	parts := make([]string, len(rounds))
	for i, c := range rounds {
		xs[i] = f(c)
		parts[i] = format(xs[i])
	}
	return medianOf{value: median(xs), at: medianAt(xs), list: strings.Join(parts, ", ")}
}

// applyRate is a round's apply, in changes/s.
func applyRate(c catchUp) float64 { return c.rate }

type applyResult struct {
	elapsed time.Duration
	cpu     string // CPU seconds of the applier, the walsender and the target backend
	// CPU time of the applier (this process), the walsender and the
	// applier's target backend during the apply.
	applierCPU, sourceCPU, targetCPU time.Duration
}

// applyCPU is the apply side's CPU: the applier and its target backend.
func (a applyResult) applyCPU() time.Duration { return a.applierCPU + a.targetCPU }

// perChange is d per change in µs.
func perChange(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

// applyUntilMarker runs a stream until it has applied the transaction
// carrying marker, and reports the time and the CPU each process spent.
func applyUntilMarker(ctx context.Context, opts cdc.Options, marker string, e *env) (applyResult, error) {
	reg := prometheus.NewRegistry()
	opts.Metrics = cdc.NewMetrics(reg)
	s, err := cdc.New(opts)
	if err != nil {
		return applyResult{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	selfCPU := processCPU(os.Getpid())
	start := time.Now()
	go func() { done <- s.Run(runCtx) }()
	var targetPid int // the applier's backend
	var targetCPU0, sourceCPU0 time.Duration
	if e != nil {
		sourceCPU0 = serverCPU(e.src.DataDir)
		targetPid, targetCPU0 = e.targetPid(ctx, done)
	}
	_, err = s.DrainToMarker(ctx, marker)
	res := applyResult{elapsed: time.Since(start)}
	if e != nil {
		res.applierCPU = processCPU(os.Getpid()) - selfCPU
		res.sourceCPU = serverCPU(e.src.DataDir) - sourceCPU0
		if targetPid != 0 {
			res.targetCPU = processCPU(targetPid) - targetCPU0
		}
		parts := []string{fmt.Sprintf("CPU s: applier (Go) %.1f, source (decoding, all processes) %.1f, target backend %.1f",
			res.applierCPU.Seconds(), res.sourceCPU.Seconds(), res.targetCPU.Seconds())}
		parts = append(parts, applyCounts(reg))
		res.cpu = strings.Join(parts, ", ")
	}
	cancel()
	if runErr := <-done; err == nil && runErr != nil && !errors.Is(runErr, context.Canceled) {
		err = runErr
	}
	if err != nil {
		return res, fmt.Errorf("apply to marker %s: %w", marker, err)
	}
	return res, nil
}

// applyCounts says how many target transactions, flushes and SQL peeks an
// apply made.
func applyCounts(reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		return "counts unknown: " + err.Error()
	}
	var batches, peeks float64
	flushes := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "reshard_cdc_apply_batches_total":
				batches += m.GetCounter().GetValue()
			case "reshard_cdc_sql_peeks_total":
				peeks += m.GetCounter().GetValue()
			case "reshard_cdc_apply_flushes_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "path" {
						flushes[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return fmt.Sprintf("%.0f target transactions, %.0f staged and %.0f text[] flushes, %.0f SQL peeks", batches, flushes["staged"], flushes["array"], peeks)
}

// targetPid finds the applier's backend on the target as soon as it
// exists, with its CPU time so far.
func (e *env) targetPid(ctx context.Context, done <-chan error) (pid int, cpu time.Duration) {
	for ctx.Err() == nil && len(done) == 0 {
		_ = e.dstPool.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE application_name = $1`, applyAppName).Scan(&pid)
		if pid != 0 {
			return pid, processCPU(pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, 0
}

// serverCPU is the CPU time of a PostgreSQL server's processes: the
// postmaster, its live children and the children it has reaped (a
// walsender closed when the stream switched to SQL peeks still counts).
func serverCPU(dataDir string) time.Duration {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pm, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	total := processCPU(pm)
	for _, n := range []int{16, 17} { // cutime, cstime: reaped children
		v, _ := procStat(pm, n)
		total += time.Duration(v) * 10 * time.Millisecond
	}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == pm {
			continue
		}
		if ppid, err := procStat(pid, 4); err == nil && ppid == pm {
			total += processCPU(pid)
		}
	}
	return total
}

// processCPU is the user+system CPU time of a process (0 if unknown).
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	u, err1 := procStat(pid, 14)
	st, err2 := procStat(pid, 15)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+st) * 10 * time.Millisecond // USER_HZ: ticks of 10 ms
}

// childEnv carries a child's configuration (JSON): a hidden mode of this
// binary that runs one applier and reports its own peak memory.
const childEnv = "RESHARD_BENCH_CHILD_APPLY"

type childConfig struct {
	Options cdc.Options
	Marker  string
}

type childResult struct {
	VmHWMKiB  int64
	Seconds   float64
	FlushRows int
}

// childApply re-executes this binary as an applier and waits for its result.
func (e *env) childApply(ctx context.Context, cfg childConfig) (childResult, error) {
	var res childResult
	b, err := json.Marshal(cfg)
	if err != nil {
		return res, err
	}
	exe, err := os.Executable()
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return res, fmt.Errorf("child applier: %w: %s", err, stderr.String())
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("child applier said %q: %w", out, err)
	}
	return res, nil
}

// runChildApply is the child: apply to the marker, then print the peak RSS.
func runChildApply(cfgJSON string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child applier: bad configuration:", err)
		return 2
	}
	res, err := applyUntilMarker(context.Background(), cfg.Options, cfg.Marker, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child applier:", err)
		return 1
	}
	hwm, err := vmHWM()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child applier:", err)
		return 1
	}
	flush := cfg.Options.FlushRows
	if flush <= 0 {
		flush = cdc.DefaultFlushRows
	}
	_ = json.NewEncoder(os.Stdout).Encode(childResult{VmHWMKiB: hwm, Seconds: res.elapsed.Seconds(), FlushRows: flush})
	return 0
}

// vmHWM is this process's peak resident set size in KiB.
func vmHWM() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// startCDCProfile starts a CPU profile of this process (the applier) when
// -cdc-profile is set, into that file with suffix before its extension
// ("cdc.prof", "hot" → "cdc-hot.prof"), and returns what stops it.
func (e *env) startCDCProfile(suffix string) (stop func(), err error) {
	path := e.cfg.cdcProfile
	if path == "" {
		return func() {}, nil
	}
	if suffix != "" {
		ext := filepath.Ext(path)
		path = strings.TrimSuffix(path, ext) + "-" + suffix + ext
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// streamResult is one streaming of a slot to a reader that drops it.
type streamResult struct {
	elapsed, walsenderCPU time.Duration
}

// streamCeiling streams a slot's pending changes up to the marker with
// payload marker through a walsender to a reader that only looks for the
// marker: the rate no applier fed by START_REPLICATION can pass. It
// acknowledges nothing, so the slot still holds every change afterwards.
func (e *env) streamCeiling(ctx context.Context, names cdc.Names, marker string) (streamResult, error) {
	conn, err := cdc.ConnectReplication(ctx, e.src.DSN("postgres", false)+"&replication=database", nil)
	if err != nil {
		return streamResult{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	start := time.Now()
	if err := pglogrepl.StartReplication(ctx, conn, names.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + names.Publication + "'", "messages 'true'"}}); err != nil {
		return streamResult{}, fmt.Errorf("stream slot %s: %w", names.Slot, err)
	}
	var pid int
	if err := e.srcPool.QueryRow(ctx, `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = $1`, names.Slot).Scan(&pid); err != nil {
		return streamResult{}, err
	}
	cpu0 := processCPU(pid)
	want := []byte(marker)
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return streamResult{}, fmt.Errorf("stream slot %s: %w", names.Slot, err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		// A logical message ('M') holding the marker's payload ends it.
		if d := cd.Data[1+24:]; len(d) > 0 && d[0] == 'M' && bytes.Contains(d, want) {
			return streamResult{elapsed: time.Since(start), walsenderCPU: processCPU(pid) - cpu0}, nil
		}
	}
}

// peekToClient sends a slot's pending changes to this program through
// pg_logical_slot_peek_binary_changes and drops them: decoding without the
// walsender's per-message sends. It returns the messages and the time.
func (e *env) peekToClient(ctx context.Context, names cdc.Names) (int, time.Duration, error) {
	if err := e.slotReleased(ctx, names.Slot); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	rows, err := e.srcPool.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)`,
		names.Slot, names.Publication)
	if err != nil {
		return 0, 0, fmt.Errorf("peek slot %s: %w", names.Slot, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		if len(rows.RawValues()[0]) > 0 {
			n++
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("peek slot %s: %w", names.Slot, err)
	}
	return n, time.Since(start), nil
}
