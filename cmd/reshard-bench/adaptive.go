package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// The adaptive section: a pgbench-style workload on the source — 2 clients,
// each its own connection, half primary-key reads and half single-row
// updates of a table of its own, at a fixed offered rate so that latencies
// are comparable — measured idle, during an unthrottled copy of the users
// table, during copies at fixed rates (the sweep: which rate the workload
// bears within the target, the frontier the throttle should find), and
// during copies under the adaptive throttle with a target of +10% probe
// latency, one steered by a read probe and one by a commit probe, then idle
// again (the machine is shared: the last idle window shows how far the
// floor moved meanwhile). Latency counts from
// each operation's scheduled start, so a client that falls behind is not
// hidden (no coordinated omission).
const (
	adaptiveClients   = 2
	adaptiveOpsPerSec = 200 // per client
	adaptiveKeys      = 10_000
	adaptiveTarget    = 10.0 // percent
	// The probes: the workload's read, and a commit of a row the workload
	// does not touch (its keys are 1..adaptiveKeys): the copy's writes show
	// in a commit's WAL flush, which a read never waits for.
	adaptiveReadProbe  = "SELECT v FROM bench_kv WHERE k = 1"
	adaptiveWriteProbe = "UPDATE bench_kv SET v = v + 1 WHERE k = 0"
	adaptiveRebaseline = 30 * time.Second
)

func runAdaptive(ctx context.Context, e *env, r *report) error {
	window := e.cfg.adaptiveWindow
	if _, err := e.srcPool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS bench_kv; CREATE TABLE bench_kv (k int PRIMARY KEY, v bigint NOT NULL, pad text NOT NULL);
		INSERT INTO bench_kv SELECT g, 0, md5(g::text) FROM generate_series(0, %d) g`, adaptiveKeys)); err != nil {
		return fmt.Errorf("create the workload's table: %w", err)
	}
	if _, err := e.srcPool.Exec(ctx, `VACUUM ANALYZE bench_kv`); err != nil {
		return err
	}
	// The target answers the same probe (an idle copy of the table).
	if _, err := e.dstPool.Exec(ctx, `DROP TABLE IF EXISTS bench_kv; CREATE TABLE bench_kv (k int PRIMARY KEY, v bigint NOT NULL, pad text NOT NULL);
		INSERT INTO bench_kv VALUES (0, 0, ''), (1, 0, '')`); err != nil {
		return err
	}
	set, err := tableset.Introspect(ctx, e.srcPool, tableset.Spec{Name: "bench", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		return err
	}
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	// copyLoop copies the whole users table again and again until ctx ends,
	// each pass into an emptied target, and returns the rows committed.
	copyLoop := func(ctx context.Context, th *backfill.Throttle) (int64, error) {
		var rows int64
		for pass := 0; ctx.Err() == nil; pass++ {
			if _, err := e.dstPool.Exec(ctx, `TRUNCATE users; DROP SCHEMA IF EXISTS reshard CASCADE`); err != nil {
				if ctx.Err() != nil {
					break
				}
				return rows, err
			}
			st, err := backfill.Copy(ctx, e.srcPool, e.dstPool, backfill.Options{Move: fmt.Sprintf("adaptive-%d", pass), Set: set, Ranges: all,
				ChunkRows: e.cfg.chunkRows, Throttle: th})
			rows += st.Rows
			if err != nil && ctx.Err() == nil {
				return rows, err
			}
		}
		return rows, nil
	}
	type result struct {
		name          string
		p50, p99, max time.Duration
		ops, late     int
		copyRows      int64
		// probes are the source's readings of each probe (PGSignals, as
		// the throttle reads them), one a second: what the throttle could see.
		probes [2][]time.Duration
	}
	probeSQL := [2]string{adaptiveReadProbe, adaptiveWriteProbe}
	probeName := [2]string{"read probe", "commit probe"}
	measure := func(name string, work func(ctx context.Context) (int64, error)) (result, error) {
		res := result{name: name}
		wctx, cancel := context.WithTimeout(ctx, window)
		defer cancel()
		var wg sync.WaitGroup
		var copyErr error
		if work != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res.copyRows, copyErr = work(wctx)
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
				}
				for i, sql := range probeSQL {
					if s, err := (&backfill.PGSignals{Source: e.srcPool, ProbeSQL: sql}).Read(wctx); err == nil {
						res.probes[i] = append(res.probes[i], s.SourceProbe)
					}
				}
			}
		}()
		lat, err := workload(wctx, e, window)
		cancel()
		wg.Wait()
		if err != nil {
			return res, err
		}
		if copyErr != nil {
			return res, copyErr
		}
		slices.Sort(lat)
		res.ops = len(lat)
		res.p50, res.p99, res.max = pct(lat, 0.50), pct(lat, 0.99), lat[len(lat)-1]
		return res, nil
	}
	add := func(res result, err error) (result, error) {
		if err != nil {
			return res, err
		}
		fmt.Fprintf(e.out, "%s: %d ops, p50 %s, p99 %s, max %s, copy %.0f rows/s; read probe %s; commit probe %s\n", res.name, res.ops, res.p50, res.p99, res.max,
			float64(res.copyRows)/window.Seconds(), spread(res.probes[0]), spread(res.probes[1]))
		return res, nil
	}
	// An arm copies under an adaptive throttle steered by one of the probes;
	// its state carries from one round to the next (as from one copy slice to
	// the next), its baseline measured before the first and again every
	// adaptiveRebaseline. Both arms run in every round, so the two probes
	// are compared on the same machine at about the same time.
	type arm struct {
		name, probe      string
		ad               *backfill.Adaptive
		th               *backfill.Throttle
		limited, watched time.Duration
		held             map[string]time.Duration // by limiting signal
		results          []result
		ends             []float64 // the rate at the end of each window
	}
	var arms []*arm
	for i, sql := range probeSQL {
		th := backfill.NewThrottle(0, 0)
		arms = append(arms, &arm{name: probeName[i], probe: sql, th: th, held: map[string]time.Duration{},
			ad: &backfill.Adaptive{Throttle: th, Reader: &backfill.PGSignals{Source: e.srcPool, Target: e.dstPool, ProbeSQL: sql},
				Controller: backfill.Controller{Limits: backfill.AdaptiveLimits{MaxLatencyIncrease: adaptiveTarget}},
				// The worker measures again every 5 minutes; windows of 20 s
				// call for the same at a shorter scale (each measurement
				// holds the copy about 1.5 s: every 30 s is 5% of the time).
				Rebaseline: adaptiveRebaseline}})
	}
	adaptiveRun := func(a *arm) func(ctx context.Context) (int64, error) {
		return func(ctx context.Context) (int64, error) {
			var rows int64
			// Sample what holds the throttle back, every 250 ms.
			sctx, stop := context.WithCancel(ctx)
			var sw sync.WaitGroup
			sw.Add(1)
			go func() {
				defer sw.Done()
				t := time.NewTicker(250 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-sctx.Done():
						return
					case <-t.C:
						a.watched += 250 * time.Millisecond
						if s := a.ad.State(); s.Signal != backfill.SignalNone && s.Signal != "" {
							a.limited += 250 * time.Millisecond
							a.held[s.Signal] += 250 * time.Millisecond
						}
					}
				}
			}()
			err := a.ad.With(ctx, func(ctx context.Context) error {
				var err error
				rows, err = copyLoop(ctx, a.th)
				return err
			})
			stop()
			sw.Wait()
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				err = nil
			}
			return rows, err
		}
	}
	// Rounds of idle, unthrottled, each fixed rate of the sweep, adaptive,
	// then idle once more: the machine is shared, and its floor moves from
	// one window to the next.
	var idles, fulls []result
	fixed := make([][]result, len(e.cfg.adaptiveRates))
	for round := range e.cfg.adaptiveRounds {
		res, err := add(measure(fmt.Sprintf("round %d idle", round+1), nil))
		if err != nil {
			return err
		}
		idles = append(idles, res)
		if res, err = add(measure(fmt.Sprintf("round %d unthrottled copy", round+1), func(ctx context.Context) (int64, error) {
			return copyLoop(ctx, backfill.NewThrottle(0, 0))
		})); err != nil {
			return err
		}
		fulls = append(fulls, res)
		for i, rate := range e.cfg.adaptiveRates {
			if res, err = add(measure(fmt.Sprintf("round %d copy at %.0f rows/s", round+1, rate), func(ctx context.Context) (int64, error) {
				return copyLoop(ctx, backfill.NewThrottle(rate, 0))
			})); err != nil {
				return err
			}
			fixed[i] = append(fixed[i], res)
		}
		for _, a := range arms {
			if res, err = add(measure(fmt.Sprintf("round %d adaptive copy (+%.0f%%, %s)", round+1, adaptiveTarget, a.name), adaptiveRun(a))); err != nil {
				return err
			}
			a.results = append(a.results, res)
			st := a.ad.State()
			a.ends = append(a.ends, st.RowsPerSec)
			fmt.Fprintf(e.out, "  adaptive (%s): rate at the end %.0f rows/s, %s\n", a.name, st.RowsPerSec, st.Reason)
		}
	}
	res, err := add(measure("idle at the end", nil))
	if err != nil {
		return err
	}
	idles = append(idles, res)

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p99s := func(rs []result) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = ms(r.p99)
		}
		return out
	}
	p50s := func(rs []result) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = ms(r.p50)
		}
		return out
	}
	rates := func(rs []result) []float64 {
		out := make([]float64, len(rs))
		for i, r := range rs {
			out[i] = float64(r.copyRows) / window.Seconds()
		}
		return out
	}
	list := func(xs []float64) string {
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = format(x)
		}
		return strings.Join(parts, ", ")
	}
	what := func(n int) string {
		return fmt.Sprintf("%d clients × %d ops/s offered (half PK reads, half single-row updates), %d windows of %s", adaptiveClients, adaptiveOpsPerSec, n, window)
	}
	type kind struct {
		name string
		rs   []result
	}
	kinds := []kind{{"idle", idles}, {"unthrottled copy", fulls}}
	for i, rate := range e.cfg.adaptiveRates {
		kinds = append(kinds, kind{fmt.Sprintf("copy at %.0f rows/s", rate), fixed[i]})
	}
	for _, a := range arms {
		kinds = append(kinds, kind{fmt.Sprintf("adaptive copy (+%.0f%%, %s)", adaptiveTarget, a.name), a.results})
	}
	for _, k := range kinds {
		d := what(len(k.rs))
		r.add("workload p50, "+k.name, median(p50s(k.rs)), "ms", "median; "+d+": "+list(p50s(k.rs)))
		r.add("workload p99, "+k.name, median(p99s(k.rs)), "ms", "median; "+d+": "+list(p99s(k.rs)))
		for i := range probeSQL {
			var all []time.Duration
			for _, res := range k.rs {
				all = append(all, res.probes[i]...)
			}
			if len(all) > 0 {
				slices.Sort(all)
				r.add(fmt.Sprintf("%s, %s", probeName[i], k.name), float64(pct(all, 0.5))/float64(time.Microsecond), "µs",
					fmt.Sprintf("median of the source's readings of %q (median of 5 back to back, one reading a second) over the windows; p10–p90 %s–%s",
						probeSQL[i], pct(all, 0.1).Round(time.Microsecond), pct(all, 0.9).Round(time.Microsecond)))
			}
		}
	}
	idle50 := median(p50s(idles))
	r.add("workload p50 increase, unthrottled copy", 100*(median(p50s(fulls))/idle50-1), "%", "medians, over idle")
	for _, a := range arms {
		r.add(fmt.Sprintf("workload p50 increase, adaptive copy (%s)", a.name), 100*(median(p50s(a.results))/idle50-1), "%", "medians, over idle")
	}
	idle := median(p99s(idles))
	lo, hi := slices.Min(p99s(idles)), slices.Max(p99s(idles))
	// A verdict only where the machine allows one: when the idle windows'
	// p99s alone differ by more than the target, no copy can be shown to
	// stay within it (nor to leave it); the idle windows' highest p99 is
	// then the line a copy's p99 is judged against ("within the idle noise").
	noisy := hi/lo-1 > adaptiveTarget/100
	noise := fmt.Sprintf("the idle windows' p99s alone spread from %s to %s ms (+%.0f%%)", format(lo), format(hi), 100*(hi/lo-1))
	r.add("workload p99 increase, unthrottled copy", 100*(median(p99s(fulls))/idle-1), "%", "medians, over idle")
	// The frontier: the highest fixed rate whose median p99 stays within the
	// target over idle, and the highest within the idle windows' own spread.
	// The machine is shared and other work only ever adds latency: the
	// lowest p99 of each kind's windows is its least disturbed, and the
	// frontier by those is a second opinion.
	within, inNoise, byLows := 0.0, 0.0, 0.0
	idleLow := slices.Min(p99s(idles))
	for i, rate := range e.cfg.adaptiveRates {
		p99 := median(p99s(fixed[i]))
		r.add(fmt.Sprintf("workload p99 increase, copy at %.0f rows/s", rate), 100*(p99/idle-1), "%",
			fmt.Sprintf("medians, over idle; lowest windows %+.0f%%; copy achieved %s rows/s", 100*(slices.Min(p99s(fixed[i]))/idleLow-1), list(rates(fixed[i]))))
		if p99 <= idle*(1+adaptiveTarget/100) {
			within = max(within, rate)
		}
		if p99 <= hi {
			inNoise = max(inNoise, rate)
		}
		if slices.Min(p99s(fixed[i])) <= idleLow*(1+adaptiveTarget/100) {
			byLows = max(byLows, rate)
		}
	}
	if len(e.cfg.adaptiveRates) > 0 {
		caveat := ""
		if noisy {
			caveat = "; " + noise + ", more than the target: as noisy as that"
		}
		r.add(fmt.Sprintf("copy frontier, workload p99 within +%.0f%% of idle", adaptiveTarget), within, "rows/s",
			fmt.Sprintf("the highest fixed rate of %s rows/s whose median p99 is within +%.0f%% of idle's median (0: none); by the lowest window of each: %.0f rows/s%s",
				list(e.cfg.adaptiveRates), adaptiveTarget, byLows, caveat))
		r.add("copy frontier, workload p99 within the idle noise", inNoise, "rows/s",
			fmt.Sprintf("the highest fixed rate whose median p99 is at most the idle windows' highest (%s ms) (0: none)", format(hi)))
	}
	r.add("copy rate, unthrottled", median(rates(fulls)), "rows/s", "median over the windows (the whole users table, copied again and again): "+list(rates(fulls)))
	for _, a := range arms {
		p99 := median(p99s(a.results))
		verdict := "within it"
		if p99 > idle*(1+adaptiveTarget/100) {
			verdict = "NOT within it"
		}
		if noisy {
			verdict = "no verdict: " + noise + ", more than the target — the machine's other load, not the copy, sets the tail here"
			if p99 <= hi {
				verdict += "; within the idle noise"
			} else {
				verdict += "; above the idle noise"
			}
		}
		r.add(fmt.Sprintf("workload p99 increase, adaptive copy (%s)", a.name), 100*(p99/idle-1), "%",
			fmt.Sprintf("medians, over idle; target +%.0f%%: %s", adaptiveTarget, verdict))
		c := a.ad.Controller
		r.add(fmt.Sprintf("copy rate, adaptive (%s)", a.name), median(rates(a.results)), "rows/s",
			fmt.Sprintf("median over the windows, slow start included: %s; probe %q (median of 5, smoothed), baseline (last: %s on the source, its own spread +%.0f%%) measured with the workload running, again every %s with the copy held; a signal held the rate back %.0f%% of the time (%s)",
				list(rates(a.results)), a.probe, c.SourceBaseline.Round(time.Microsecond), 100*float64(c.SourceNoise)/float64(max(c.SourceBaseline, 1)),
				adaptiveRebaseline, 100*a.limited.Seconds()/max(a.watched.Seconds(), 1), bySignal(a.held, a.watched)))
		r.add(fmt.Sprintf("copy rate, adaptive (%s), at the end", a.name), median(a.ends), "rows/s", "median of the rate the throttle had set at the end of each window: "+list(a.ends))
	}
	return nil
}

// bySignal says the share of watched each signal held the rate back.
func bySignal(held map[string]time.Duration, watched time.Duration) string {
	var parts []string
	for _, sig := range slices.Sorted(maps.Keys(held)) {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", sig, 100*held[sig].Seconds()/max(watched.Seconds(), 1)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// spread says a window's probe readings: median and p10–p90.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Sorted(slices.Values(ds))
	us := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	return fmt.Sprintf("median %s, p10–p90 %s–%s (%d)", us(pct(s, 0.5)), us(pct(s, 0.1)), us(pct(s, 0.9)), len(s))
}

// workload runs the clients at their fixed offered rate until ctx ends and
// returns every operation's latency, from its scheduled start.
func workload(ctx context.Context, e *env, window time.Duration) ([]time.Duration, error) {
	var (
		mu   sync.Mutex
		all  []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	for c := range adaptiveClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, e.src.DSN("postgres", false))
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			defer conn.Close(context.WithoutCancel(ctx))
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			interval := time.Second / adaptiveOpsPerSec
			lat := make([]time.Duration, 0, int(window/interval)+1)
			next := time.Now()
			for {
				if d := time.Until(next); d > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(d):
					}
				}
				if ctx.Err() != nil {
					break
				}
				k := rng.IntN(adaptiveKeys) + 1
				var err error
				if rng.IntN(2) == 0 {
					var v int64
					err = conn.QueryRow(ctx, `SELECT v FROM bench_kv WHERE k = $1`, k).Scan(&v)
				} else {
					_, err = conn.Exec(ctx, `UPDATE bench_kv SET v = v + 1 WHERE k = $1`, k)
				}
				if ctx.Err() != nil {
					break // cut off by the window's end: not counted
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				lat = append(lat, time.Since(next))
				next = next.Add(interval)
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	if len(all) == 0 {
		return nil, errors.New("workload: no operation completed")
	}
	return all, nil
}

// pct is the q-quantile of sorted xs.
func pct(xs []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(xs)) + 0.5)
	return xs[min(max(i-1, 0), len(xs)-1)]
}
