package backfill

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reshard/reshard/internal/promtest"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestPGSignals reads every signal from real servers: the probe, active
// backends (reshard's own sessions not counted), the WAL a slot retains as
// the source writes, and the replay lag of a physical replica — a standby
// speaking the replication protocol that reports WAL applied 1.5 s after
// receiving it, so that the walsender measures a real replay lag.
func TestPGSignals(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	ctx := context.Background()
	src.Exec(t, `CREATE TABLE w (id bigserial PRIMARY KEY, v text)`)
	dst.Exec(t, `CREATE TABLE w (id bigserial PRIMARY KEY, v text)`)
	src.Exec(t, `SELECT pg_create_logical_replication_slot('adaptive_test', 'pgoutput')`)
	p := &PGSignals{Source: src.Pool, Target: dst.Pool, Slot: "adaptive_test", ProbeSQL: "SELECT count(*) FROM w"}
	s0, err := p.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s0.SourceProbe <= 0 || s0.TargetProbe <= 0 || s0.SlotWAL < 0 || s0.Replicas != 0 || s0.ReplicaLag != 0 {
		t.Fatalf("idle servers: %+v", s0)
	}

	// Active backends: a statement running in a session of its own counts;
	// one whose application_name is reshard's does not.
	sleep := func(appName string) (stop func()) {
		c := src.Conn(t)
		if _, err := c.Exec(ctx, "SET application_name = '"+appName+"'"); err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _, _ = c.Exec(sctx, `SELECT pg_sleep(30)`) }()
		time.Sleep(300 * time.Millisecond)
		return func() { cancel(); <-done }
	}
	stopOwn := sleep(OwnAppName + " backfill")
	s1, err := p.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopApp := sleep("app")
	s2, err := p.Read(ctx)
	stopApp()
	stopOwn()
	if err != nil {
		t.Fatal(err)
	}
	if s1.ActiveBackends != s0.ActiveBackends || s2.ActiveBackends != s0.ActiveBackends+1 {
		t.Fatalf("active backends idle %d, with reshard's sleeping %d (want the same), with the app's too %d (want one more)",
			s0.ActiveBackends, s1.ActiveBackends, s2.ActiveBackends)
	}

	// The slot retains what the source writes.
	// (random text: TOAST does not compress it away)
	src.Exec(t, `INSERT INTO w (v) SELECT (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 32 + 0 * g)) FROM generate_series(1, 2000) g`)
	s3, err := p.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s3.SlotWAL < s0.SlotWAL+2000*1000 {
		t.Fatalf("slot WAL %d after writing 2 MB, %d before", s3.SlotWAL, s0.SlotWAL)
	}
	p.Slot = "no_such_slot"
	if s, err := p.Read(ctx); err != nil || s.SlotWAL != -1 {
		t.Fatalf("missing slot: %d, %v", s.SlotWAL, err)
	}

	// A physical replica 1.5 s behind, while the source writes.
	src.Exec(t, `SELECT pg_create_physical_replication_slot('adaptive_test_phys', true)`)
	t.Cleanup(func() { _, _ = src.Pool.Exec(ctx, `SELECT pg_drop_replication_slot('adaptive_test_phys')`) })
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		errc <- lateStandby(sctx, src.Server.DSN("postgres", false)+"&replication=true", 1500*time.Millisecond)
	}()
	go func() {
		defer wg.Done()
		for sctx.Err() == nil {
			_, _ = src.Pool.Exec(sctx, `INSERT INTO w (v) VALUES ('x')`)
			time.Sleep(20 * time.Millisecond)
		}
		errc <- nil
	}()
	defer func() { stop(); wg.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s, err := p.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Replicas == 1 && s.ReplicaLag >= time.Second {
			if s.ReplicaLag > 5*time.Second {
				t.Fatalf("replica lag %s, want about 1.5s", s.ReplicaLag)
			}
			break
		}
		if time.Now().After(deadline) {
			select {
			case err := <-errc:
				t.Fatalf("standby: %v", err)
			default:
			}
			t.Fatalf("no replica lag seen: %d replicas, lag %s", s.Replicas, s.ReplicaLag)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lateStandby streams WAL physically from dsn and reports each position
// applied delay after it arrived, until ctx ends.
func lateStandby(ctx context.Context, dsn string, delay time.Duration) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return err
	}
	if err := pglogrepl.StartReplication(ctx, conn, "adaptive_test_phys", sys.XLogPos, pglogrepl.StartReplicationOptions{Mode: pglogrepl.PhysicalReplication}); err != nil {
		return err
	}
	type arrival struct {
		pos pglogrepl.LSN
		at  time.Time
	}
	var (
		arrived         []arrival
		received, apply = sys.XLogPos, sys.XLogPos
		next            = time.Now()
	)
	for ctx.Err() == nil {
		if time.Now().After(next) {
			for len(arrived) > 0 && time.Since(arrived[0].at) >= delay {
				apply, arrived = arrived[0].pos, arrived[1:]
			}
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: received, WALFlushPosition: received, WALApplyPosition: apply}); err != nil {
				return err
			}
			next = time.Now().Add(100 * time.Millisecond)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			if e, ok := msg.(*pgproto3.ErrorResponse); ok {
				return errors.New(strings.TrimSpace(e.Message))
			}
			continue
		}
		x, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			return err
		}
		received = x.WALStart + pglogrepl.LSN(len(x.WALData))
		arrived = append(arrived, arrival{received, time.Now()})
	}
	return nil
}

// fakeSignals returns s on every read, counting reads.
type fakeSignals struct {
	mu    sync.Mutex
	s     Signals
	reads int
}

func (f *fakeSignals) Read(context.Context) (Signals, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.s, nil
}

func (f *fakeSignals) set(s Signals) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s = s
}

// A copy held back by its adaptive throttle slows to the floor rate and
// still finishes: being throttled never fails it. The throttle names the
// signal, and lets the copy go faster once the signal is calm again.
func TestCopyUnderAdaptiveThrottle(t *testing.T) {
	f := newFixture(t, 1500)
	want := f.expectedRows(t)
	ctx := context.Background()
	sig := &fakeSignals{s: Signals{SourceProbe: time.Millisecond, SlotWAL: -1}}
	th := NewThrottle(0, 0)
	reg := prometheus.NewRegistry()
	a := &Adaptive{Throttle: th, Reader: sig, Interval: 50 * time.Millisecond, BaselineReadings: 3, Move: "m_adaptive",
		Controller: Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}, Min: 1000}, Metrics: NewMetrics(reg)}
	opts := f.opts("m_adaptive")
	opts.Throttle, opts.ChunkRows, opts.Parallel = th, 50, 1
	var st Stats
	var mid AdaptiveState
	var midGauge float64
	start := time.Now()
	err := a.With(ctx, func(ctx context.Context) error {
		sig.set(Signals{SourceProbe: 3 * time.Millisecond, SlotWAL: -1}) // +200%
		var n atomic.Int64
		opts.Progress = func(p Progress) {
			if n.Add(1) == 10 {
				mid = a.State()
				midGauge = promtest.Gauge(t, reg, "reshard_throttle_limiting_signal", "m_adaptive", SignalSourceLatency)
			}
		}
		var err error
		st, err = Copy(ctx, f.src.Pool, f.dst.Pool, opts)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != want {
		t.Fatalf("copied %d rows, want %d", st.Rows, want)
	}
	f.expectCopied(t)
	if a.Controller.SourceBaseline != time.Millisecond {
		t.Fatalf("baseline %s, want the probe before the copy (1ms)", a.Controller.SourceBaseline)
	}
	if mid.Signal != SignalSourceLatency || mid.RowsPerSec != 1000 || !strings.Contains(mid.Reason, "+200%") || midGauge != 1 {
		t.Fatalf("state during the copy: %+v, limiting signal gauge %g", mid, midGauge)
	}
	// At the floor of 1000 rows/s the copy takes about want/1000 s.
	if el, floor := time.Since(start), time.Duration(float64(want)/1000*0.7*float64(time.Second)); el < floor {
		t.Fatalf("copy of %d rows took %s under a throttle at 1000 rows/s (want ≥ %s)", want, el, floor)
	}
	if got := promtest.Gauge(t, reg, "reshard_throttle_limiting_signal", "m_adaptive", SignalSourceLatency); got != 0 {
		t.Fatalf("limiting signal gauge %g after the copy ended, want its series gone", got)
	}
	// Calm again: once the smoothed probe is back down, the rate grows.
	var d Decision
	for range 15 {
		d = a.Controller.Step(Signals{SourceProbe: time.Millisecond, SlotWAL: -1}, 0)
	}
	if d.Signal != SignalNone || d.RowsPerSec <= 1000 {
		t.Fatalf("calm steps: %+v", d)
	}
}

// The shards' own load drifts up: against the baseline measured before the
// work, the throttle would sit at its floor. Measuring the baseline again
// (the work held meanwhile: no row passes) finds the new floor, and the rate
// grows again.
func TestAdaptiveRebaseline(t *testing.T) {
	sig := &fakeSignals{s: Signals{SourceProbe: time.Millisecond, SlotWAL: -1}}
	th := NewThrottle(0, 0)
	a := &Adaptive{Throttle: th, Reader: sig, Interval: 20 * time.Millisecond, BaselineReadings: 3, Rebaseline: 600 * time.Millisecond,
		Settle: 50 * time.Millisecond, Controller: Controller{Limits: AdaptiveLimits{MaxLatencyIncrease: 10}, Smoothing: 1}}
	var (
		heldSeen   bool
		pinned     AdaptiveState
		maxWaitGap time.Duration
	)
	err := a.With(context.Background(), func(ctx context.Context) error {
		sig.set(Signals{SourceProbe: 2 * time.Millisecond, SlotWAL: -1}) // the drift, not the work
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			th.mu.Lock()
			heldSeen = heldSeen || th.held != nil
			th.mu.Unlock()
			start := time.Now()
			if _, err := th.Wait(ctx, 1, 0); err != nil {
				return err
			}
			maxWaitGap = max(maxWaitGap, time.Since(start))
			if s := a.State(); s.Signal == SignalSourceLatency && pinned.At.IsZero() {
				pinned = s
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pinned.At.IsZero() {
		t.Fatal("the drift never showed as a latency increase before the new baseline")
	}
	if !heldSeen || maxWaitGap < 50*time.Millisecond {
		t.Fatalf("the work was not held while the baseline was measured (held seen %v, longest wait %s)", heldSeen, maxWaitGap)
	}
	if s := a.State(); a.Controller.SourceBaseline != 2*time.Millisecond || s.Signal != SignalNone {
		t.Fatalf("after measuring again: baseline %s, state %+v", a.Controller.SourceBaseline, s)
	}
}

// A throttle change while the work runs: Retune's limits and ceiling hold
// from the next step. Held at the floor by active backends over their
// limit, the work is let go when the limit is raised, up to the new
// ceiling.
func TestAdaptiveRetune(t *testing.T) {
	sig := &fakeSignals{s: Signals{ActiveBackends: 20, SlotWAL: -1}}
	th := NewThrottle(0, 0)
	a := &Adaptive{Throttle: th, Reader: sig, Interval: 10 * time.Millisecond, Move: "m_retune",
		Controller: Controller{Limits: AdaptiveLimits{MaxActiveBackends: 10}, Min: 100}}
	var held, after AdaptiveState
	err := a.With(context.Background(), func(ctx context.Context) error {
		time.Sleep(300 * time.Millisecond)
		held = a.State()
		a.Retune(AdaptiveLimits{MaxActiveBackends: 100}, 5000)
		time.Sleep(500 * time.Millisecond)
		after = a.State()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if held.Signal != SignalActive || held.RowsPerSec != 100 {
		t.Fatalf("before the change: %+v; want held at the floor by active backends", held)
	}
	if after.Signal != SignalNone || after.RowsPerSec <= 100 || after.RowsPerSec > 5000 {
		t.Fatalf("after raising the limit to 100 backends and the ceiling to 5000 rows/s: %+v", after)
	}
	if a.Controller.Limits.MaxActiveBackends != 100 || a.Controller.Max != 5000 {
		t.Fatalf("controller limits %+v, max %g", a.Controller.Limits, a.Controller.Max)
	}
	var nilA *Adaptive
	nilA.Retune(AdaptiveLimits{}, 0) // no adaptive throttle: nothing to do
}
