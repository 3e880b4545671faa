package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// capacityWriteEvery and capacityWriteRows pace the steady writer of
// section capacity: 100 rows of ~1 KiB every 100 ms (about 1 MiB/s of WAL).
const (
	capacityWriteEvery = 100 * time.Millisecond
	capacityWriteRows  = 100
)

// runCapacity predicts a whole-table move with the capacity model, then
// makes it as the code does (a slot created first, then the copy, throttled
// to last -capacity-copy) under steady writes on the source, sampling the
// slot's retained WAL every second: the peak against the prediction, and
// the copy's duration and the target's growth against theirs.
func runCapacity(ctx context.Context, e *env, r *report) error {
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	set, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		return err
	}
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	ests, err := tableset.EstimateRanges(ctx, e.srcPool, set.Tables[0], ranges)
	if err != nil {
		return err
	}
	var estRows int64
	for _, es := range ests {
		estRows += es.Rows
	}
	rowsPerSec := float64(estRows) / e.cfg.capacityCopy.Seconds()
	if _, err := e.srcPool.Exec(ctx, `DROP TABLE IF EXISTS capwrites; CREATE TABLE capwrites (id bigserial PRIMARY KEY, pad text)`); err != nil {
		return err
	}
	stopWrites := steadyWrites(ctx, e.srcPool)
	defer stopWrites()
	time.Sleep(2 * time.Second) // the writer is steady before the probe

	pools := func(_ context.Context, shard string) (*pgxpool.Pool, error) {
		if shard == "source" {
			return e.srcPool, nil
		}
		return e.dstPool, nil
	}
	in := capacity.MoveInput{ID: "capacity", Source: "source", Target: "target", Ranges: ranges, Tables: set.Tables, Estimates: ests}
	window := 10 * time.Second
	pred, err := capacity.Assess(ctx, pools, []capacity.MoveInput{in}, capacity.AssessOptions{WALWindow: window,
		Options: capacity.Options{RowsPerSec: rowsPerSec}, Probe: capacity.ProbeOptions{ChunkRows: e.cfg.chunkRows}})
	if err != nil {
		return err
	}
	pm := pred.Moves[0]
	fmt.Fprintf(e.out, "predicted: copy %s at %.0f rows/s, slot WAL %s (WAL rate %s/s over %s), target growth %s\n", pm.Copy.Duration().Round(time.Second),
		rowsPerSec, capacity.HumanBytes(pm.SlotWAL), capacity.HumanBytes(int64(pred.Shards[0].WALBytesPerSec)), window, capacity.HumanBytes(pm.TargetGrowth))

	const slot = "reshard_bench_capacity"
	if _, err := e.srcPool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		return fmt.Errorf("create the slot: %w", err)
	}
	defer func() { _, _ = e.srcPool.Exec(context.WithoutCancel(ctx), `SELECT pg_drop_replication_slot($1)`, slot) }()
	stopSampling := sampleSlot(ctx, e.srcPool, slot, nil)
	start := time.Now()
	st, err := backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: "capacity", Set: set, Ranges: ranges, ChunkRows: e.cfg.chunkRows,
		Throttle: backfill.NewThrottle(rowsPerSec, 0)})
	took := time.Since(start)
	// The stream would start now: the slot's peak is its WAL at this moment
	// (the sampler reads it once more as it stops).
	peak, _ := stopSampling()
	if err != nil {
		return err
	}
	var grown int64
	if err := e.dstPool.QueryRow(ctx, `SELECT pg_total_relation_size('users')`).Scan(&grown); err != nil {
		return err
	}
	off := func(pred, actual float64) float64 { return 100 * (pred - actual) / actual }
	r.add("capacity_copy_s", took.Seconds(), "s", fmt.Sprintf("%d rows at %.0f rows/s under steady writes (%d rows of 1 KiB every %s on the source); predicted %s (%+.0f%%)",
		st.Rows, rowsPerSec, capacityWriteRows, capacityWriteEvery, pm.Copy.Duration().Round(time.Second), off(pm.Copy.Duration().Seconds(), took.Seconds())))
	r.add("capacity_peak_slot_wal_mib", float64(peak)/(1<<20), "MiB", fmt.Sprintf("the slot created before the copy, sampled every second; predicted %s from the WAL rate over %s (%+.0f%%); grows with the copy: the stream starts after it",
		capacity.HumanBytes(pm.SlotWAL), window, off(float64(pm.SlotWAL), float64(peak))))
	r.add("capacity_target_growth_mib", float64(grown)/(1<<20), "MiB", fmt.Sprintf("pg_total_relation_size of the target's users after the copy; predicted %s (%+.0f%%)",
		capacity.HumanBytes(pm.TargetGrowth), off(float64(pm.TargetGrowth), float64(grown))))

	// The throttle sets the copy's time above; unthrottled, the model's rate
	// is the sampled chunk's.
	if err := e.truncateTarget(ctx); err != nil {
		return err
	}
	free, err := capacity.Assess(ctx, pools, []capacity.MoveInput{in}, capacity.AssessOptions{WALWindow: time.Second,
		Probe: capacity.ProbeOptions{ChunkRows: e.cfg.chunkRows}})
	if err != nil {
		return err
	}
	fm := free.Moves[0]
	start = time.Now()
	st, err = backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: "capacity-free", Set: set, Ranges: ranges, ChunkRows: e.cfg.chunkRows,
		Throttle: backfill.NewThrottle(0, 0)})
	if err != nil {
		return err
	}
	took = time.Since(start)
	r.add("capacity_unthrottled_copy_s", took.Seconds(), "s", fmt.Sprintf("%d rows, no throttle, under the same writes; predicted %s from %s (%+.0f%%)",
		st.Rows, fm.Copy.Duration().Round(100*time.Millisecond), fm.Basis, off(fm.Copy.Duration().Seconds(), took.Seconds())))
	return nil
}

// steadyWrites inserts capacityWriteRows rows of about 1 KiB into capwrites
// every capacityWriteEvery until stopped.
func steadyWrites(ctx context.Context, pool *pgxpool.Pool) (stop func()) {
	return every(ctx, capacityWriteEvery, func(ctx context.Context) {
		_, _ = pool.Exec(ctx, `INSERT INTO capwrites (pad) SELECT repeat(md5(random()::text), 32) FROM generate_series(1, $1::int)`, capacityWriteRows)
	})
}

// every runs fn every interval until the returned stop (which may be
// called more than once) has waited for its last run.
func every(ctx context.Context, interval time.Duration, fn func(context.Context)) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			fn(wctx)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}
