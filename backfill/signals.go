package backfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SignalReader reads the adaptive throttle's signals once.
type SignalReader interface {
	Read(ctx context.Context) (Signals, error)
}

// OwnAppName is the application_name prefix of reshard's own sessions on a
// shard (the copy's reads, the deletes, verify): the active-backends signal
// does not count them, or the work would throttle itself.
const OwnAppName = "reshard"

// setOwnAppName marks a statement's transaction as reshard's own.
const setOwnAppName = "SET LOCAL application_name = '" + OwnAppName + " backfill'; "

// PGSignals reads the signals from a move's two shards: the probe's latency
// on each, the source's active backends, the replay lag of either side's
// physical replicas, and the WAL the move's slot retains on the source.
type PGSignals struct {
	Source *pgxpool.Pool
	Target *pgxpool.Pool // nil: the work touches one shard (cleanup)
	// Slot is the move's slot on the source ("": none).
	Slot string
	// ProbeSQL is the probe query (default "SELECT 1"); an operator's probe
	// that resembles the application's queries tracks their latency best.
	ProbeSQL string
	// Probes is how many probes one reading runs on each side, back to
	// back; the reading is their median (default 5).
	Probes int
}

// Read reads every signal once.
func (p *PGSignals) Read(ctx context.Context) (Signals, error) {
	s := Signals{SlotWAL: -1}
	var err error
	if s.SourceProbe, err = p.probe(ctx, p.Source); err != nil {
		return s, fmt.Errorf("probe the source: %w", err)
	}
	if p.Target != nil {
		if s.TargetProbe, err = p.probe(ctx, p.Target); err != nil {
			return s, fmt.Errorf("probe the target: %w", err)
		}
	}
	if err := p.Source.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE state <> 'idle' AND backend_type = 'client backend' AND pid <> pg_backend_pid()
		AND coalesce(application_name, '') NOT LIKE $1`, OwnAppName+"%").Scan(&s.ActiveBackends); err != nil {
		return s, fmt.Errorf("count the source's active backends: %w", err)
	}
	for _, pool := range []*pgxpool.Pool{p.Source, p.Target} {
		if pool == nil {
			continue
		}
		n, lag, err := replicaLag(ctx, pool)
		if err != nil {
			return s, err
		}
		s.Replicas += n
		s.ReplicaLag = max(s.ReplicaLag, lag)
	}
	if p.Slot != "" {
		// The insert position: with synchronous_commit off the WAL written
		// so far can lag what the slot will have to keep by megabytes.
		err := p.Source.QueryRow(ctx, `SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), restart_lsn), 0)::bigint
			FROM pg_replication_slots WHERE slot_name = $1`, p.Slot).Scan(&s.SlotWAL)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return s, fmt.Errorf("read the WAL retained by slot %s: %w", p.Slot, err)
		}
	}
	return s, nil
}

// replicaLag is the number of physical replicas streaming from pool's
// server and the largest replay lag among them. A logical walsender (CDC,
// ours included) is connected to a database; a physical one is not.
// pg_stat_replication's replay_lag is NULL once a replica has caught up.
func replicaLag(ctx context.Context, pool *pgxpool.Pool) (int, time.Duration, error) {
	var (
		n   int
		sec float64
	)
	err := pool.QueryRow(ctx, `SELECT count(*), coalesce(max(extract(epoch FROM r.replay_lag)), 0)::float8
		FROM pg_stat_replication r JOIN pg_stat_activity a ON a.pid = r.pid WHERE a.datname IS NULL`).Scan(&n, &sec)
	if err != nil {
		return 0, 0, fmt.Errorf("read the replay lag of physical replicas: %w", err)
	}
	return n, time.Duration(sec * float64(time.Second)), nil
}

// probe runs the probe query Probes times on one connection and returns the
// median latency (the pool's wait for a connection not included).
func (p *PGSignals) probe(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	sql := p.ProbeSQL
	if sql == "" {
		sql = "SELECT 1"
	}
	n := p.Probes
	if n <= 0 {
		n = 5
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		rows, err := conn.Query(ctx, sql)
		if err != nil {
			return 0, err
		}
		for rows.Next() {
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, err
		}
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return ds[n/2], nil
}

// Adaptive is the adaptive throttle: every Interval it reads the signals,
// steps the Controller and sets the Throttle's adaptive rows/s. It serves
// the copy, verify and cleanup alike: they wait on the Throttle.
type Adaptive struct {
	Throttle   *Throttle
	Reader     SignalReader
	Controller Controller
	// Interval between readings (default 1s). BaselineReadings is how many
	// readings, 100 ms apart, the baseline is the median of (default 9).
	Interval         time.Duration
	BaselineReadings int
	// Rebaseline, when positive, measures the baselines again that often,
	// holding the work meanwhile (Settle for the work in flight to end, then
	// the readings): the shards' own load drifts (the application's day, other
	// work on the machine), and against a baseline that has become too low
	// the throttle would hold the work at its floor for no cause of its own.
	Rebaseline time.Duration
	Settle     time.Duration // default 500ms
	// MeasuredAt is when the Controller's baselines were measured, when they
	// come from an earlier run (Rebaseline counts from it).
	MeasuredAt time.Time
	Move       string
	Logger     *slog.Logger
	Metrics    *Metrics

	mu     sync.Mutex
	state  AdaptiveState
	retune *retune // limits to take at the next step
}

type retune struct {
	limits AdaptiveLimits
	max    float64
}

// Retune replaces the Controller's limits and its rows/s ceiling (0: none)
// while Run steps it: a throttle change the operator made while the work
// runs. The next step follows them. A nil a does nothing.
func (a *Adaptive) Retune(limits AdaptiveLimits, maxRowsPerSec float64) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.retune = &retune{limits: limits, max: maxRowsPerSec}
}

// takeRetune applies a pending Retune (from Run's goroutine, which alone
// steps the Controller).
func (a *Adaptive) takeRetune() {
	a.mu.Lock()
	r := a.retune
	a.retune = nil
	a.mu.Unlock()
	if r != nil {
		a.Controller.Limits, a.Controller.Max = r.limits, r.max
	}
}

// AdaptiveState is what the adaptive throttle did last.
type AdaptiveState struct {
	RowsPerSec float64
	// Signal and Reason: what holds the work back (Decision).
	Signal, Reason                 string
	Signals                        Signals
	SourceBaseline, TargetBaseline time.Duration
	SourceNoise, TargetNoise       time.Duration // the baselines' own spread
	BaselineAt                     time.Time     // when the baselines were measured
	At                             time.Time
}

// Prepare measures the probe baselines the Controller lacks (before the work
// starts: the baseline is the databases without it) and sets the first rate.
func (a *Adaptive) Prepare(ctx context.Context) error {
	c := &a.Controller
	if c.Limits.MaxLatencyIncrease > 0 && c.SourceBaseline == 0 {
		if err := a.measure(ctx); err != nil {
			return err
		}
	}
	if c.Rate() <= 0 {
		c.rate = DefaultStartRate
	}
	if c.Max > 0 {
		c.rate = min(c.rate, c.Max)
	}
	a.Throttle.SetAdaptive(c.Rate())
	a.mu.Lock()
	a.state = AdaptiveState{RowsPerSec: c.Rate(), Signal: SignalNone, SourceBaseline: c.SourceBaseline, TargetBaseline: c.TargetBaseline,
		SourceNoise: c.SourceNoise, TargetNoise: c.TargetNoise, BaselineAt: a.MeasuredAt, At: time.Now()}
	a.mu.Unlock()
	return nil
}

// measure sets the Controller's baselines from BaselineReadings readings,
// 100 ms apart, and starts its smoothing afresh.
func (a *Adaptive) measure(ctx context.Context) error {
	c := &a.Controller
	n := a.BaselineReadings
	if n <= 0 {
		n = 9
	}
	var src, dst []time.Duration
	for i := range n {
		if i > 0 { // spread over about a second: one slow moment is not the baseline
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		s, err := a.Reader.Read(ctx)
		if err != nil {
			return fmt.Errorf("adaptive throttle: measure the baseline: %w", err)
		}
		src, dst = append(src, s.SourceProbe), append(dst, s.TargetProbe)
	}
	c.SourceBaseline, c.SourceNoise = baseline(src)
	c.TargetBaseline, c.TargetNoise = baseline(dst)
	c.smoothed = [2]time.Duration{}
	a.MeasuredAt = time.Now()
	return nil
}

// baseline is the median of readings and their spread above it: the
// second highest reading's distance from the median (one outlier among the
// readings is a moment, not the machine's noise).
func baseline(readings []time.Duration) (median, noise time.Duration) {
	s := slices.Sorted(slices.Values(readings))
	n := len(s)
	if n == 0 {
		return 0, 0
	}
	median = s[n/2]
	if n >= 3 {
		noise = s[n-2] - median
	}
	return median, noise
}

// rebaseline holds the work, measures the baselines again and lets the
// work go on; a failed measurement keeps the old baselines.
func (a *Adaptive) rebaseline(ctx context.Context, log *slog.Logger) {
	settle := a.Settle
	if settle <= 0 {
		settle = 500 * time.Millisecond
	}
	a.Throttle.hold()
	defer a.Throttle.release()
	select {
	case <-ctx.Done():
		return
	case <-time.After(settle):
	}
	before := a.Controller.SourceBaseline
	if err := a.measure(ctx); err != nil {
		if ctx.Err() == nil {
			log.Warn("adaptive throttle: measuring the baseline again failed; keeping the old one", "error", err)
		}
		return
	}
	log.Debug("adaptive throttle: baseline measured again", "source_before", before, "source", a.Controller.SourceBaseline,
		"source_noise", a.Controller.SourceNoise, "target", a.Controller.TargetBaseline, "target_noise", a.Controller.TargetNoise)
}

// Run steps the throttle every Interval until ctx ends; it returns nil then.
// A reading that fails holds the rate: the work goes on, slow or not.
func (a *Adaptive) Run(ctx context.Context) error {
	interval := a.Interval
	if interval <= 0 {
		interval = time.Second
	}
	log := a.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last, lastAt := a.Throttle.passed.Load(), time.Now()
	lastSignal := ""
	if a.MeasuredAt.IsZero() {
		a.MeasuredAt = time.Now()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		a.takeRetune()
		if a.Rebaseline > 0 && a.Controller.Limits.MaxLatencyIncrease > 0 && time.Since(a.MeasuredAt) >= a.Rebaseline {
			a.rebaseline(ctx, log)
			a.MeasuredAt = time.Now() // a failed measurement is not tried again at once
			last, lastAt = a.Throttle.passed.Load(), time.Now()
			continue
		}
		s, err := a.Reader.Read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		now := time.Now()
		passed := a.Throttle.passed.Load()
		achieved := float64(passed-last) / now.Sub(lastAt).Seconds()
		last, lastAt = passed, now
		var d Decision
		if err != nil {
			d = a.Controller.unreadable(err)
		} else {
			d = a.Controller.Step(s, achieved)
		}
		a.Throttle.SetAdaptive(d.RowsPerSec)
		a.Metrics.adaptive(a.Move, d)
		if d.Signal != lastSignal {
			log.Info("adaptive throttle", "rows_per_sec", int64(d.RowsPerSec), "signal", d.Signal, "reason", d.Reason)
			lastSignal = d.Signal
		}
		a.mu.Lock()
		a.state = AdaptiveState{RowsPerSec: d.RowsPerSec, Signal: d.Signal, Reason: d.Reason, Signals: s,
			SourceBaseline: a.Controller.SourceBaseline, TargetBaseline: a.Controller.TargetBaseline,
			SourceNoise: a.Controller.SourceNoise, TargetNoise: a.Controller.TargetNoise, BaselineAt: a.MeasuredAt, At: now}
		a.mu.Unlock()
	}
}

// State is the last step's outcome.
func (a *Adaptive) State() AdaptiveState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// With runs work while the adaptive throttle steers its Throttle: the
// baseline first, then a step every Interval until work returns. A nil a
// runs work alone.
func (a *Adaptive) With(ctx context.Context, work func(ctx context.Context) error) error {
	if a == nil {
		return work(ctx)
	}
	if err := a.Prepare(ctx); err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(actx) // returns nil when cancelled
	}()
	err := work(ctx)
	cancel()
	<-done
	// The gauges say what holds the work back now: nothing, once it ended.
	a.Metrics.adaptiveEnded(a.Move)
	return err
}
