package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// runCapStream measures the slot's peak retained WAL during a whole-table
// copy throttled to last -capstream-copy under steady writes on the source
// (capwrites' ~1 MiB/s, plus updates of users rows the copy moves), twice:
// before, as a move without the copy gate runs (the slot created first, the
// stream only after the copy), and after, with the stream running during
// the copy through the copy gate (backfill.Options.StreamDuringCopy,
// cdc.Options.CopyGate). Both are set against the lag budget: the WAL the
// source writes in -capstream-lag-budget. After the gated copy the stream
// drains and the target's users must equal the source's.
func runCapStream(ctx context.Context, e *env, r *report) error {
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	set, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		return err
	}
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	var rows int64
	if err := e.srcPool.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&rows); err != nil {
		return err
	}
	rowsPerSec := float64(rows) / e.cfg.capStreamCopy.Seconds()
	if _, err := e.srcPool.Exec(ctx, `DROP TABLE IF EXISTS capwrites; CREATE TABLE capwrites (id bigserial PRIMARY KEY, pad text)`); err != nil {
		return err
	}
	stopWrites := steadyWrites(ctx, e.srcPool)
	defer stopWrites()
	stopUpdates := steadyUpdates(ctx, e.srcPool, rows)
	defer stopUpdates()
	time.Sleep(2 * time.Second)
	rate, err := walRate(ctx, e.srcPool, 10*time.Second)
	if err != nil {
		return err
	}
	budget := int64(rate * e.cfg.capStreamLagBudget.Seconds())
	fmt.Fprintf(e.out, "capstream: %d rows at %.0f rows/s; WAL %s/s; lag budget %s (%s of WAL)\n", rows, rowsPerSec,
		capacity.HumanBytes(int64(rate)), capacity.HumanBytes(budget), e.cfg.capStreamLagBudget)
	stamp := time.Now().Unix()

	// Before: the slot first, the copy, the stream only after it.
	before := fmt.Sprintf("capbefore%d", stamp)
	names, err := e.cdcJoin(ctx, before, set, ranges)
	if err != nil {
		return err
	}
	sample := sampleSlot(ctx, e.srcPool, names.Slot, nil)
	start := time.Now()
	st, err := backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: before, Set: set, Ranges: ranges, ChunkRows: e.cfg.chunkRows,
		Throttle: backfill.NewThrottle(rowsPerSec, 0)})
	tookBefore := time.Since(start)
	peakBefore, _ := sample()
	if err != nil {
		return err
	}
	if err := e.cdcLeave(ctx, names); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "capstream before: %d rows in %s, peak retained %s\n", st.Rows, tookBefore.Round(time.Second), capacity.HumanBytes(peakBefore))
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}

	// After: the stream runs during the copy, through the gate.
	after := fmt.Sprintf("capafter%d", stamp)
	if names, err = e.cdcJoin(ctx, after, set, ranges); err != nil {
		return err
	}
	defer func() { _ = e.cdcLeave(context.WithoutCancel(ctx), names) }()
	if err := backfill.EnsureSchema(ctx, e.dstPool); err != nil {
		return err
	}
	o := e.cdcOptions(names, set, ranges)
	o.Move, o.CopyGate = after, after
	s, err := cdc.New(o)
	if err != nil {
		return err
	}
	sctx, stopStream := context.WithCancel(ctx)
	streamDone := make(chan error, 1)
	go func() { streamDone <- s.Run(sctx) }()
	sample = sampleSlot(ctx, e.srcPool, names.Slot, s)
	start = time.Now()
	st, err = backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: after, Set: set, Ranges: ranges, ChunkRows: e.cfg.chunkRows,
		Throttle: backfill.NewThrottle(rowsPerSec, 0), StreamDuringCopy: true})
	tookAfter := time.Since(start)
	peakAfter, peakLag := sample()
	if err != nil {
		stopStream()
		return err
	}
	stopUpdates()
	stopWrites()
	payload := fmt.Sprintf("capstream-%d", stamp)
	if err := e.mark(ctx, payload); err != nil {
		stopStream()
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	_, derr := s.DrainToMarker(dctx, payload)
	cancel()
	stopStream()
	if serr := <-streamDone; derr != nil {
		return fmt.Errorf("drain the gated stream: %w (stream: %v)", derr, serr)
	}
	g := s.GateStats()
	var srcSum, dstSum string
	sumSQL := `SELECT count(*)::text || ' ' || coalesce(sum(hashtext(u::text)::bigint), 0)::text FROM users u`
	if err := e.srcPool.QueryRow(ctx, sumSQL).Scan(&srcSum); err != nil {
		return err
	}
	if err := e.dstPool.QueryRow(ctx, sumSQL).Scan(&dstSum); err != nil {
		return err
	}
	if srcSum != dstSum {
		return fmt.Errorf("capstream: after the gated copy and the drain the target's users (count, sum of row hashes) %s differ from the source's %s", dstSum, srcSum)
	}
	fmt.Fprintf(e.out, "capstream after: %d rows in %s, peak retained %s, peak stream lag %s; gate skipped %d, held %d; target equals source (%s)\n",
		st.Rows, tookAfter.Round(time.Second), capacity.HumanBytes(peakAfter), capacity.HumanBytes(peakLag), g.Skipped, g.Held, srcSum)
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	r.add("capstream_before_peak_slot_wal_mib", mib(peakBefore), "MiB", fmt.Sprintf("stream after the copy: %d rows copied in %s under %s/s of WAL; %.1f× the lag budget (%s = %s of WAL)",
		rows, tookBefore.Round(time.Second), capacity.HumanBytes(int64(rate)), float64(peakBefore)/float64(budget), capacity.HumanBytes(budget), e.cfg.capStreamLagBudget))
	r.add("capstream_after_peak_slot_wal_mib", mib(peakAfter), "MiB", fmt.Sprintf("stream during the copy (copy gate): %d rows copied in %s; %.2f× the lag budget (goal < 2); the stream's peak lag %s; gate skipped %d changes, held %d; target equal to source after the drain",
		st.Rows, tookAfter.Round(time.Second), float64(peakAfter)/float64(budget), capacity.HumanBytes(peakLag), g.Skipped, g.Held))
	return nil
}

// steadyUpdates updates 20 random users rows every capacityWriteEvery
// until stopped: changes the copy gate applies, holds or skips.
func steadyUpdates(ctx context.Context, pool *pgxpool.Pool, rows int64) (stop func()) {
	return every(ctx, capacityWriteEvery, func(ctx context.Context) {
		_, _ = pool.Exec(ctx, `UPDATE users SET balance = balance + 1 WHERE id IN (SELECT 1 + (random() * ($1::bigint - 1))::bigint FROM generate_series(1, 20))`, rows)
	})
}

// walRate is the source's WAL bytes per second over window.
func walRate(ctx context.Context, pool *pgxpool.Pool, window time.Duration) (float64, error) {
	var a, b int64
	if err := pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint`).Scan(&a); err != nil {
		return 0, err
	}
	time.Sleep(window)
	if err := pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint`).Scan(&b); err != nil {
		return 0, err
	}
	return float64(b-a) / window.Seconds(), nil
}

// sampleSlot reads the slot's retained WAL (and the stream's lag, when s is
// set) every second until the returned stop, which gives their peaks.
func sampleSlot(ctx context.Context, pool *pgxpool.Pool, slot string, s *cdc.Stream) (stop func() (retained, lag int64)) {
	var peak, lag atomic.Int64
	read := func(ctx context.Context) {
		if st, err := backfill.ReadSlot(ctx, pool, slot, 0); err == nil && st.Retained > peak.Load() {
			peak.Store(st.Retained)
		}
		if s != nil && s.LagBytes() > lag.Load() {
			lag.Store(s.LagBytes())
		}
	}
	stopReads := every(ctx, time.Second, read)
	return func() (int64, int64) {
		read(ctx)
		stopReads()
		return peak.Load(), lag.Load()
	}
}
