package backfill

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/reshard/reshard/internal/promreg"
	"golang.org/x/time/rate"
)

// Throttle bounds the copy in rows/s and bytes/s. Its limits can change while
// a copy runs (SetLimits), for the operator's `reshard throttle`; an
// adaptive throttle (Adaptive) lowers the rows/s below them (SetAdaptive).
type Throttle struct {
	rows, bytes *rate.Limiter

	mu                    sync.Mutex
	fixedRows, fixedBytes float64 // the operator's (0: unlimited)
	adaptive              float64 // the adaptive throttle's rows/s (0: none)
	guard                 float64 // the slot guard's rows/s (0: none)

	passed atomic.Int64 // rows let through, for the adaptive throttle's achieved rate

	held chan struct{} // non-nil while the adaptive throttle holds the work (under mu); closed on release
}

// hold stops every Wait until release: the adaptive throttle measures its
// baseline without the work's load.
func (t *Throttle) hold() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = make(chan struct{})
	}
}

func (t *Throttle) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held != nil {
		close(t.held)
		t.held = nil
	}
}

// NewThrottle returns a throttle with the given limits; 0 means unlimited.
func NewThrottle(rowsPerSec, bytesPerSec float64) *Throttle {
	t := &Throttle{rows: rate.NewLimiter(rate.Inf, 1), bytes: rate.NewLimiter(rate.Inf, 1)}
	t.SetLimits(rowsPerSec, bytesPerSec)
	return t
}

// SetLimits changes both limits at once; 0 means unlimited. The burst is a
// tenth of a second's worth, so a new limit takes hold within a chunk or two.
func (t *Throttle) SetLimits(rowsPerSec, bytesPerSec float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fixedRows, t.fixedBytes = max(rowsPerSec, 0), max(bytesPerSec, 0)
	t.apply()
}

// SetAdaptive sets the adaptive throttle's rows/s (0: none); the rows/s in
// force is the lower of it and the operator's limit.
func (t *Throttle) SetAdaptive(rowsPerSec float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.adaptive = max(rowsPerSec, 0)
	t.apply()
}

// SetGuard sets the slot guard's rows/s (0: none); the rows/s in force is
// the lowest of it, the adaptive throttle's and the operator's limit.
func (t *Throttle) SetGuard(rowsPerSec float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.guard = max(rowsPerSec, 0)
	t.apply()
}

func (t *Throttle) apply() {
	set := func(l *rate.Limiter, perSec float64, minBurst int) {
		if perSec <= 0 {
			l.SetLimit(rate.Inf)
			return
		}
		l.SetBurst(max(minBurst, int(math.Min(perSec/10, math.MaxInt32))))
		l.SetLimit(rate.Limit(perSec))
	}
	set(t.rows, lowest(lowest(t.fixedRows, t.adaptive), t.guard), 1)
	set(t.bytes, t.fixedBytes, 64<<10)
}

// lowest is the lower of two limits where 0 means none.
func lowest(a, b float64) float64 {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return math.Min(a, b)
}

// Limits returns the operator's limits (0 = unlimited).
func (t *Throttle) Limits() (rowsPerSec, bytesPerSec float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fixedRows, t.fixedBytes
}

// InForce returns the limits in force: the operator's, the rows/s lowered
// by the adaptive throttle and the slot guard (0 = unlimited).
func (t *Throttle) InForce() (rowsPerSec, bytesPerSec float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lowest(lowest(t.fixedRows, t.adaptive), t.guard), t.fixedBytes
}

// ChunkRows is how many rows the next chunk may have: at most chunkRows,
// and no more than about one second of the throttle's limits (rowBytes is
// the bytes per row seen so far, 0 before the first chunk). A chunk is read
// first and waited for after; one larger than a copy slice's worth of
// throttle would wait past the slice's end, be thrown away, and be read
// again by the next slice — forever: a copy throttled below chunkRows per
// slice never progressed.
func (t *Throttle) ChunkRows(chunkRows int, rowBytes float64) int {
	rowsPerSec, bytesPerSec := t.InForce()
	n := float64(chunkRows)
	if rowsPerSec > 0 {
		n = math.Min(n, rowsPerSec)
	}
	if bytesPerSec > 0 && rowBytes > 0 {
		n = math.Min(n, bytesPerSec/rowBytes)
	}
	return max(1, int(n))
}

// Passed is how many rows Wait has let through.
func (t *Throttle) Passed() int64 { return t.passed.Load() }

// Wait blocks until rows and bytes may pass, and returns how long it waited.
func (t *Throttle) Wait(ctx context.Context, rows, bytes int) (time.Duration, error) {
	if t == nil {
		return 0, nil
	}
	start := time.Now()
	t.mu.Lock()
	held := t.held
	t.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		}
	}
	if err := waitN(ctx, t.rows, rows); err != nil {
		return time.Since(start), err
	}
	err := waitN(ctx, t.bytes, bytes)
	if err == nil {
		t.passed.Add(int64(rows))
	}
	return time.Since(start), err
}

// waitN waits for n tokens, in pieces no larger than the burst (a limiter
// refuses more than the burst at once). It waits until ctx ends rather than
// fail early: rate.Limiter.WaitN returns an error of its own at once when the
// wait would end past ctx's deadline, and a copy slice (a deadline) must end
// as its context does, not as a failed copy.
func waitN(ctx context.Context, l *rate.Limiter, n int) error {
	if l == nil {
		return nil
	}
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if l.Limit() == rate.Inf {
			return nil
		}
		k := min(n, max(1, l.Burst()))
		r := l.ReserveN(time.Now(), k)
		if !r.OK() {
			continue // the burst shrank (SetLimits) since it was read: take a smaller piece
		}
		if d := r.Delay(); d > 0 {
			tm := time.NewTimer(d)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				r.Cancel()
				return ctx.Err()
			}
		}
		n -= k
	}
	return nil
}

// Pauser pauses and resumes a copy: while paused no chunk is read; a chunk
// already read is still written. The zero value is running.
type Pauser struct {
	mu      sync.Mutex
	resumed chan struct{} // nil while running; closed on Resume
}

// Pause stops the copy before its next chunk.
func (p *Pauser) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		p.resumed = make(chan struct{})
	}
}

// Resume lets a paused copy go on.
func (p *Pauser) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed != nil {
		close(p.resumed)
		p.resumed = nil
	}
}

// Paused reports whether the copy is paused.
func (p *Pauser) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resumed != nil
}

// wait blocks while paused and returns how long it waited.
func (p *Pauser) wait(ctx context.Context) (time.Duration, error) {
	if p == nil {
		return 0, nil
	}
	start := time.Now()
	for {
		p.mu.Lock()
		ch := p.resumed
		p.mu.Unlock()
		if ch == nil {
			return time.Since(start), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		}
	}
}

// PressureFunc tells the copy to back off: a positive duration means "wait
// that long, then ask again". It is asked before every chunk.
type PressureFunc func(ctx context.Context) (time.Duration, error)

// ActiveSessions is a PressureFunc that backs off for wait while more than
// max client sessions of the source are active (running a statement), not
// counting its own query. It asks at most once a second.
func ActiveSessions(source *pgxpool.Pool, max int, wait time.Duration) PressureFunc {
	var (
		mu     sync.Mutex
		asked  time.Time
		active int
	)
	return func(ctx context.Context) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(asked) >= time.Second {
			err := source.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&active)
			if err != nil {
				return 0, err
			}
			asked = time.Now()
		}
		if active > max {
			asked = time.Time{} // ask again after the wait
			return wait, nil
		}
		return 0, nil
	}
}

// Metrics are the backfill's Prometheus metrics.
type Metrics struct {
	rows, bytes, chunks *prometheus.CounterVec
	throttled           *prometheus.CounterVec
	adaptiveRate        *prometheus.GaugeVec
	adaptiveLimit       *prometheus.GaugeVec
	slotBudgetRatio     *prometheus.GaugeVec
	slotStatus          *prometheus.GaugeVec
}

// NewMetrics registers the backfill metrics on reg (or reuses those already
// registered there).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_backfill_rows_total",
			Help: "Rows copied to the target (committed)."}, []string{"move", "table"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_backfill_bytes_total",
			Help: "Bytes copied to the target (binary COPY size, committed)."}, []string{"move", "table"}),
		chunks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_backfill_chunks_total",
			Help: "Chunks committed on the target."}, []string{"move", "table"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reshard_backfill_throttled_seconds_total",
			Help: "Time the copy waited, by reason: rate (rows/s, bytes/s), pressure (source load), pause."}, []string{"move", "reason"}),
	}
	m.adaptiveRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_throttle_adaptive_rows_per_sec",
		Help: "The rows/s the adaptive throttle allows a move's copy, verify or cleanup now."}, []string{"move"})
	m.adaptiveLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_throttle_limiting_signal",
		Help: "1 for the signal that holds the adaptive throttle of a move back now (none when none does), 0 for the others."}, []string{"move", "signal"})
	m.slotBudgetRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_slot_wal_budget_ratio",
		Help: "The WAL a move's slot retains on its source shard over its budget (max_slot_wal_keep_size's headroom or the configured wal_budget_bytes), while the copy runs; over 0.8 the slot guard slows the copy. Absent without a budget."}, []string{"move", "shard"})
	m.slotStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "reshard_slot_wal_status",
		Help: "1 for the wal_status of a move's slot on its source shard (reserved, extended, unreserved, lost), 0 for the others, while the copy runs."}, []string{"move", "shard", "status"})
	m.slotBudgetRatio = promreg.Register(reg, m.slotBudgetRatio)
	m.slotStatus = promreg.Register(reg, m.slotStatus)
	m.rows = promreg.Register(reg, m.rows)
	m.adaptiveRate = promreg.Register(reg, m.adaptiveRate)
	m.adaptiveLimit = promreg.Register(reg, m.adaptiveLimit)
	m.bytes = promreg.Register(reg, m.bytes)
	m.chunks = promreg.Register(reg, m.chunks)
	m.throttled = promreg.Register(reg, m.throttled)
	return m
}

func (m *Metrics) chunk(move, table string, rows, bytes int) {
	if m == nil {
		return
	}
	m.rows.WithLabelValues(move, table).Add(float64(rows))
	m.bytes.WithLabelValues(move, table).Add(float64(bytes))
	m.chunks.WithLabelValues(move, table).Inc()
}

// allSignals are the values of the limiting-signal label.
var allSignals = []string{SignalNone, SignalSourceLatency, SignalTargetLatency, SignalActive, SignalReplicaLag, SignalSlotWAL, SignalUnreadable}

func (m *Metrics) adaptive(move string, d Decision) {
	if m == nil {
		return
	}
	m.adaptiveRate.WithLabelValues(move).Set(d.RowsPerSec)
	for _, s := range allSignals {
		v := 0.0
		if s == d.Signal {
			v = 1
		}
		m.adaptiveLimit.WithLabelValues(move, s).Set(v)
	}
}

// slotStatuses are the values of the wal_status label.
var slotStatuses = []string{"reserved", "extended", "unreserved", "lost"}

func (m *Metrics) slotBudget(move, shard string, r SlotReading) {
	if m == nil {
		return
	}
	if r.Budget > 0 {
		m.slotBudgetRatio.WithLabelValues(move, shard).Set(r.Ratio())
	}
	for _, s := range slotStatuses {
		v := 0.0
		if s == r.Status {
			v = 1
		}
		m.slotStatus.WithLabelValues(move, shard, s).Set(v)
	}
}

func (m *Metrics) slotGuardEnded(move string) {
	if m == nil {
		return
	}
	m.slotBudgetRatio.DeletePartialMatch(prometheus.Labels{"move": move})
	m.slotStatus.DeletePartialMatch(prometheus.Labels{"move": move})
}

func (m *Metrics) adaptiveEnded(move string) {
	if m == nil {
		return
	}
	m.adaptiveRate.DeletePartialMatch(prometheus.Labels{"move": move})
	m.adaptiveLimit.DeletePartialMatch(prometheus.Labels{"move": move})
}

func (m *Metrics) waited(move, reason string, d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	m.throttled.WithLabelValues(move, reason).Add(d.Seconds())
}
