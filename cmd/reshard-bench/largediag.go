package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/capacity"
)

// The diagnostics of section large's slot WAL, printed to its log only:
// what the source did over the probe's WAL window and over the copy, so a
// missed prediction of the slot's WAL can be put down to its cause: the
// writers writing less under the copy (their acknowledged writes and
// orders' row changes a second), fewer full-page images in the copy than
// in the window (pg_stat_wal's records, images and bytes, the images
// sized as the model sizes them, and where each span sits in its
// checkpoint cycle), or WAL from something else (checkpoints started,
// autovacuum).

// sourceCounters are the source's cumulative counters at one moment.
type sourceCounters struct {
	at                         time.Time
	acked                      int64 // the writers' acknowledged writes
	ins, upd, del, hot         int64 // orders' n_tup_* (hot: n_tup_hot_upd)
	records, fpi, walBytes     int64 // pg_stat_wal
	lsn                        int64
	sinceRedo                  int64     // the WAL since the last checkpoint's redo point: its cycle's so far
	ckptTimed, ckptReq         int64     // pg_stat_bgwriter
	ckptTime                   time.Time // pg_control_checkpoint().checkpoint_time
	autovacOrders, autovacAll  int64     // pg_stat_user_tables.autovacuum_count
	autoanalyzeAll, vacuumsAll int64
}

func readSourceCounters(ctx context.Context, pool *pgxpool.Pool, acked int64) (sourceCounters, error) {
	c := sourceCounters{at: time.Now(), acked: acked}
	err := pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint, w.wal_records, w.wal_fpi, w.wal_bytes::bigint,
		b.checkpoints_timed, b.checkpoints_req, (SELECT checkpoint_time FROM pg_control_checkpoint()),
		(SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), redo_lsn)::bigint FROM pg_control_checkpoint()),
		coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'orders'), 0),
		coalesce((SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'orders'), 0),
		coalesce((SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'orders'), 0),
		coalesce((SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'orders'), 0),
		coalesce((SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'orders'), 0),
		(SELECT coalesce(sum(autovacuum_count), 0)::bigint FROM pg_stat_all_tables),
		(SELECT coalesce(sum(autoanalyze_count), 0)::bigint FROM pg_stat_all_tables),
		(SELECT coalesce(sum(vacuum_count), 0)::bigint FROM pg_stat_all_tables)
		FROM pg_stat_wal w, pg_stat_bgwriter b`).Scan(&c.lsn, &c.records, &c.fpi, &c.walBytes, &c.ckptTimed, &c.ckptReq, &c.ckptTime, &c.sinceRedo,
		&c.ins, &c.upd, &c.del, &c.hot, &c.autovacOrders, &c.autovacAll, &c.autoanalyzeAll, &c.vacuumsAll)
	if err != nil {
		return c, fmt.Errorf("read the source's counters for the slot-WAL diagnostics: %w", err)
	}
	return c, nil
}

// printSpan prints what the source did between a and b; fpiBytes sizes an
// image (the model's WALReading.FPIBytes of the span's reading).
func printSpan(out io.Writer, what string, a, b sourceCounters, fpiBytes float64) {
	s := b.at.Sub(a.at).Seconds()
	if s <= 0 {
		return
	}
	ps := func(n int64) float64 { return float64(n) / s }
	writes := b.acked - a.acked
	changes := (b.ins - a.ins) + (b.upd - a.upd) + (b.del - a.del)
	rec, fpi, wb := b.records-a.records, b.fpi-a.fpi, b.walBytes-a.walBytes
	img := float64(fpi) * fpiBytes
	perWrite := 0.0
	if writes > 0 {
		perWrite = (float64(wb) - img) / float64(writes)
	}
	hot := 0.0
	if u := b.upd - a.upd; u > 0 {
		hot = 100 * float64(b.hot-a.hot) / float64(u)
	}
	fmt.Fprintf(out, "diag %s: %.1f s; writers %d acknowledged writes (%.0f/s); orders %d row changes (%.0f/s: %d ins, %d upd, %.0f %% of them HOT, %d del); %.2f WAL records a write\n",
		what, s, writes, ps(writes), changes, ps(changes), b.ins-a.ins, b.upd-a.upd, hot, b.del-a.del, float64(b.records-a.records)/max(float64(writes), 1))
	fmt.Fprintf(out, "diag %s: pg_stat_wal %d records (%.0f/s), %d full-page images (%.1f/s), %s (%s/s; the WAL position moved %s); images at %.0f B each %s (%.0f %%), the rest %s/s, %.0f B a write\n",
		what, rec, ps(rec), fpi, ps(fpi), capacity.HumanBytes(wb), capacity.HumanBytes(int64(ps(wb))), capacity.HumanBytes(b.lsn-a.lsn),
		fpiBytes, capacity.HumanBytes(int64(img)), 100*img/max(float64(wb), 1), capacity.HumanBytes(int64((float64(wb)-img)/s)), perWrite)
	fmt.Fprintf(out, "diag %s: the checkpoint cycle's WAL so far (since the last redo point) %s at the span's start, %s at its end\n", what, capacity.HumanBytes(a.sinceRedo), capacity.HumanBytes(b.sinceRedo))
	fmt.Fprintf(out, "diag %s: checkpoints started %d timed, %d requested; the last began %s before the span and %s before its end; autovacuums %d of orders, %d of all tables (%d autoanalyzes, %d manual vacuums)\n",
		what, b.ckptTimed-a.ckptTimed, b.ckptReq-a.ckptReq, a.at.Sub(a.ckptTime).Round(time.Second), b.at.Sub(b.ckptTime).Round(time.Second),
		b.autovacOrders-a.autovacOrders, b.autovacAll-a.autovacAll, b.autoanalyzeAll-a.autoanalyzeAll, b.vacuumsAll-a.vacuumsAll)
}

// printServerSettings prints the source's settings that decide its
// checkpoints and full-page images.
func printServerSettings(ctx context.Context, out io.Writer, pool *pgxpool.Pool) {
	rows, err := pool.Query(ctx, `SELECT name, setting || coalesce(' ' || unit, '') FROM pg_settings WHERE name IN
		('checkpoint_timeout', 'max_wal_size', 'checkpoint_completion_target', 'full_page_writes', 'wal_compression', 'data_checksums', 'wal_log_hints', 'autovacuum', 'shared_buffers') ORDER BY name`)
	if err != nil {
		fmt.Fprintf(out, "diag settings: %v\n", err)
		return
	}
	defer rows.Close()
	var s []string
	for rows.Next() {
		var n, v string
		if rows.Scan(&n, &v) == nil {
			s = append(s, n+"="+v)
		}
	}
	var reloptions string
	_ = pool.QueryRow(ctx, `SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE relname = 'orders'`).Scan(&reloptions)
	fmt.Fprintf(out, "diag settings of the source: %s; orders' reloptions: %q\n", strings.Join(s, " "), reloptions)
}

// printReading prints a reading as JSON, for the model's rules to be run
// again on it offline.
func printReading(out io.Writer, what string, r capacity.WALReading) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	fmt.Fprintf(out, "diag %s reading (FPIBytes %.0f, FPIShare %.3f, RawRate %s/s, SteadyRate %s/s): %s\n", what, r.FPIBytes(), r.FPIShare(),
		capacity.HumanBytes(int64(r.RawRate())), capacity.HumanBytes(int64(r.SteadyRate())), b)
}

// copyWatch follows the source through the copy, a sample a second: its
// WAL as the probe reads its window (capacity.WALMeter, over the whole
// copy), the writers' acknowledged writes, and any vacuum running
// (pg_stat_progress_vacuum).
type copyWatch struct {
	mu      sync.Mutex
	meter   *capacity.WALMeter
	acked   []int64
	vacuums map[string]int // "relation (phase)" → seconds seen
	stop    func()
}

func startCopyWatch(ctx context.Context, pool *pgxpool.Pool, acked func() int64) (*copyWatch, error) {
	m, err := capacity.StartWALMeter(ctx, pool)
	if err != nil {
		return nil, err
	}
	w := &copyWatch{meter: m, acked: []int64{acked()}, vacuums: map[string]int{}}
	w.stop = every(ctx, time.Second, func(ctx context.Context) {
		w.mu.Lock()
		defer w.mu.Unlock()
		_ = w.meter.Sample(ctx)
		w.acked = append(w.acked, acked())
		rows, err := pool.Query(ctx, `SELECT coalesce(relid::regclass::text, relid::text), phase FROM pg_stat_progress_vacuum`)
		if err != nil {
			return
		}
		defer rows.Close()
		for rows.Next() {
			var rel, phase string
			if rows.Scan(&rel, &phase) == nil {
				w.vacuums[rel+" ("+phase+")"]++
			}
		}
	})
	return w, nil
}

// end stops the sampling and prints what it saw; it returns the copy's
// reading.
func (w *copyWatch) end(ctx context.Context, out io.Writer) capacity.WALReading {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	r, err := w.meter.Reading(ctx)
	if err != nil {
		fmt.Fprintf(out, "diag copy: no reading: %v\n", err)
		return r
	}
	var fpi []int64
	for _, p := range r.Parts {
		fpi = append(fpi, p.FPI)
	}
	fmt.Fprintf(out, "diag copy: full-page images a second: %v\n", fpi)
	var per10 []int64
	for i := 10; i < len(w.acked); i += 10 {
		per10 = append(per10, (w.acked[i]-w.acked[i-10])/10)
	}
	fmt.Fprintf(out, "diag copy: the writers' acknowledged writes a second, by 10 s: %v\n", per10)
	if len(w.vacuums) == 0 {
		fmt.Fprintf(out, "diag copy: no vacuum seen running (pg_stat_progress_vacuum, a sample a second)\n")
	} else {
		fmt.Fprintf(out, "diag copy: vacuums seen running (seconds sampled): %v\n", w.vacuums)
	}
	printReading(out, "copy", r)
	return r
}

// warmUp waits until the writers have written each key -large-warmup
// times on average since they started (10 minutes at most), printing
// every 20 s their rate, the share of their updates that were HOT, the
// WAL records a write and the full-page images a second: on the freshly
// loaded table their first updates move each row off its full page, and
// the HOT share, and with it the WAL a write, settles only once every key
// has been written a few times (-large-gb 1 at a steady 500 writes/s:
// 69 % HOT in the probe's window, 84 % in the 40 s after it, 93 % in the
// copy after that; at 20 GB, WAL records a write 4.31, 3.94, 3.60).
func (lr *largeRun) warmUp(ctx context.Context) error {
	per := lr.e.cfg.largeWarmup
	if per <= 0 {
		return nil
	}
	want := int64(per * float64(len(lr.writers.keys)))
	acked := lr.writers.st.Acked.Load
	start := time.Now()
	prev, err := readSourceCounters(ctx, lr.e.srcPool, acked())
	if err != nil {
		return err
	}
	for acked() < want && time.Since(start) < 10*time.Minute {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Second):
		}
		c, err := readSourceCounters(ctx, lr.e.srcPool, acked())
		if err != nil {
			return err
		}
		s := c.at.Sub(prev.at).Seconds()
		writes, upd := c.acked-prev.acked, c.upd-prev.upd
		hot := 0.0
		if upd > 0 {
			hot = 100 * float64(c.hot-prev.hot) / float64(upd)
		}
		fmt.Fprintf(lr.r.out, "warm-up: %d writes since the writers started (%.1f a key); the last %.0f s: %.0f writes/s, %.0f %% of the updates HOT, %.2f WAL records a write, %.0f full-page images/s\n",
			c.acked, float64(c.acked)/float64(len(lr.writers.keys)), s, float64(writes)/s, hot, float64(c.records-prev.records)/max(float64(writes), 1), float64(c.fpi-prev.fpi)/s)
		prev = c
	}
	fmt.Fprintf(lr.r.out, "writers warmed up: %d writes (%.1f a key) after waiting %s\n", acked(), float64(acked())/float64(len(lr.writers.keys)), time.Since(start).Round(time.Second))
	return nil
}

// sinceLogger logs to out at debug level, each record with its time since
// t0 and the step's name: where a step's time goes.
func sinceLogger(out io.Writer, step string, t0 time.Time) *slog.Logger {
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.String("since", step+" +"+a.Value.Time().Sub(t0).Round(time.Millisecond).String())
		}
		return a
	}}))
}
