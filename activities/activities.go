package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/internal/promreg"
	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// Metrics are the activity layer's own figures; the domain packages' metrics
// are passed through.
type Metrics struct {
	Backfill *backfill.Metrics
	CDC      *cdc.Metrics
	Verify   *verify.Metrics

	writePause     prometheus.Histogram
	bytesRemaining *prometheus.GaugeVec
	eta            *prometheus.GaugeVec
	cutovers       *prometheus.CounterVec
	failovers      *failoverCounter

	series *moveSeries // every vector registered, for moveEnded
}

// NewMetrics registers the activity metrics and those of the packages the
// activities drive.
//
// Series labelled with a move id are deleted when the move ends in this
// worker (moveEnded), so that the number of series stays bounded by the
// moves running, not the moves ever run.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	series := &moveSeries{Registerer: reg}
	reg = series
	m := &Metrics{
		series:   series,
		Backfill: backfill.NewMetrics(reg),
		CDC:      cdc.NewMetrics(reg),
		Verify:   verify.NewMetrics(reg),
		writePause: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "reshard_cutover_write_pause_seconds",
			Help:    "Write pause of each cutover attempt, aborted ones included (fence to unfence, from the move's journal).",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300},
		}),
		bytesRemaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reshard_migration_bytes_remaining",
			Help: "Estimated bytes a move still has to copy.",
		}, []string{"migration", "move"}),
		eta: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reshard_migration_eta_seconds",
			Help: "Estimated seconds until a move's copy is done, at its current rate.",
		}, []string{"migration", "move"}),
		cutovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reshard_cutover_attempts_total",
			Help: "Cutover attempts by outcome (done, aborted, error).",
		}, []string{"outcome"}),
	}
	m.failovers = newFailoverMetric()
	m.writePause = promreg.Register(reg, m.writePause)
	m.bytesRemaining = promreg.Register(reg, m.bytesRemaining)
	m.eta = promreg.Register(reg, m.eta)
	m.cutovers = promreg.Register(reg, m.cutovers)
	m.failovers.vec = promreg.Register(reg, m.failovers.vec)
	return m
}

// Activities are the activity methods, registered under the names of
// workflows.Activity*. One value serves a worker process.
type Activities struct {
	pools   pools
	log     *slog.Logger
	metrics *Metrics

	// streams are the forward CDC streams running in this process, by move
	// id: verify (HoldAt) and cutover (DrainToMarker) run in the same
	// Temporal session as the stream and find it here.
	mu      sync.Mutex
	streams map[string]*cdc.Stream
	// targets are the targets' identities the moves' forward streams saw
	// last, by move id (failover.go).
	targets map[string]cdc.ServerIdentity
	// ended are the forward streams that ended by themselves in this
	// process (MoveRef.Stream and the error), by move id, until the move's
	// next stream starts: a phase activity that works next to that stream
	// then returns at once instead of waiting streamWait for a stream only
	// the workflow starts again (a source failover, ErrTypeFailedOver, then
	// reaches the workflow's recovery at once).
	ended map[string]streamEnd

	controlMu    sync.Mutex
	controlReady bool   // control schema (topology, cutover journal) ensured
	cluster      string // the control database's cluster id, once read (guard.go)

	rates copyRates // the copies' rate windows, from slice to slice

	// LiveThrottle, when set, returns the throttle the move workflow whose
	// id it is given has in force now (the worker queries it): a running
	// verify, CLEANUP or rollback follows it. Set before the worker starts.
	LiveThrottle func(ctx context.Context, workflowID string) (workflows.Throttle, error)

	// SQLCatchUpBytes is the CDC lag past which a stream catches up by SQL
	// peeks of its slot (cdc.Options.PeekCatchUpBytes): 0 for the default,
	// negative for never. Set before the worker starts.
	SQLCatchUpBytes int64

	// CapacityWALWindow is how long PLAN's capacity probe watches each
	// shard's WAL rate (0: capacity.DefaultWALWindow). Set before the
	// worker starts.
	CapacityWALWindow time.Duration
	budgets           atomic.Pointer[map[string]capacity.Budget] // SetBudgets
	guardRates        sync.Map                                   // move id → the slot guard's rows/s its last copy slice left
}

// New returns the activities of a worker.
func New(r *Resolver, log *slog.Logger, m *Metrics) *Activities {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NewMetrics(prometheus.NewRegistry())
	}
	return &Activities{pools: pools{r: r}, log: log, metrics: m, streams: map[string]*cdc.Stream{}, targets: map[string]cdc.ServerIdentity{}, ended: map[string]streamEnd{}}
}

// Close closes the pools.
func (a *Activities) Close() { a.pools.close() }

// Register lists the activity functions with their contract names.
func (a *Activities) Register(register func(fn any, name string)) {
	// Every activity runs only for its own cluster (guard.go).
	register(guarded(a, a.Plan), workflows.ActivityPlan)
	register(guarded(a, a.PublishMigrating), workflows.ActivityPublishMigrating)
	register(guarded(a, a.PublishStable), workflows.ActivityPublishStable)
	register(guardedErr(a, a.PreflightMove), workflows.ActivityPreflightMove)
	register(guarded(a, a.Join), workflows.ActivityJoin)
	register(guarded(a, a.CopySlice), workflows.ActivityCopySlice)
	register(guardedErr(a, a.RunCDC), workflows.ActivityRunCDC)
	register(guarded(a, a.CDCStatus), workflows.ActivityCDCStatus)
	register(guarded(a, a.Verify), workflows.ActivityVerify)
	register(guarded(a, a.PrepareReverse), workflows.ActivityPrepareReverse)
	register(guarded(a, a.Cutover), workflows.ActivityCutover)
	register(guardedErr(a, a.StopForward), workflows.ActivityStopForward)
	register(guardedErr(a, a.RunReverse), workflows.ActivityRunReverse)
	register(guarded(a, a.Cleanup), workflows.ActivityCleanup)
	register(guarded(a, a.Rollback), workflows.ActivityRollback)
	register(guarded(a, a.RecoverSource), workflows.ActivityRecoverSource)
	register(guarded(a, a.Repair), workflows.ActivityRepair)
	register(guarded(a, a.RecoverReverse), workflows.ActivityRecoverReverse)
}

func (a *Activities) putStream(move string, s *cdc.Stream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.streams[move] = s
	delete(a.ended, move)
}

// streamEnd is a forward stream that ended by itself: its MoveRef.Stream
// and why.
type streamEnd struct {
	stream string
	err    error
}

// streamEnded records that the move's forward stream s, named stream by
// its workflow, ended on err, unless another stream of the move took its
// place meanwhile.
func (a *Activities) streamEnded(move, stream string, s *cdc.Stream, err error) {
	if stream == "" {
		return
	}
	if err == nil {
		err = errors.New("the stream ended by itself")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur := a.streams[move]; cur == s || cur == nil {
		a.ended[move] = streamEnd{stream: stream, err: err}
	}
}

func (a *Activities) dropStream(move string, s *cdc.Stream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.streams[move] == s {
		delete(a.streams, move)
	}
}

// streamWait is how long a phase activity waits for the move's stream to
// run in its worker (the session's CDC activity may start a moment after
// it); past it, the stream has ended and the workflow must restart it.
const streamWait = 30 * time.Second

// stream waits (heartbeating) for the move's forward stream to run in this
// process, at most wait: the CDC activity of the session may start a moment
// after the phase activity that needs it. Past wait it returns a
// non-retryable ErrTypeNoStream: the stream ended, and the workflow restarts
// it before it runs the activity again. A stream that ended on its
// stream that ended by itself in this process is not waited for when it
// is the one ref works next to (ref.Stream): its end is returned at once,
// ErrTypeFailedOver for its source's failover (the workflow recovers the
// move), else ErrTypeNoStream. A stream ref names that has not started
// yet is waited for.
func (a *Activities) stream(ctx context.Context, ref workflows.MoveRef, wait time.Duration) (*cdc.Stream, error) {
	move := ref.Spec.ID
	deadline := time.Now().Add(wait)
	for {
		a.mu.Lock()
		s, end := a.streams[move], a.ended[move]
		a.mu.Unlock()
		if s != nil {
			return s, nil
		}
		if end.stream != "" && end.stream == ref.Stream {
			if errors.Is(end.err, cdc.ErrFailedOver) {
				return nil, classify(fmt.Errorf("the CDC stream of move %s ended: %w", move, end.err))
			}
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("the CDC stream of move %s ended (%v); the workflow restarts it", move, end.err), workflows.ErrTypeNoStream, nil)
		}
		if time.Now().After(deadline) {
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("the CDC stream of move %s is not running in this worker's session (waited %s); the workflow restarts it", move, wait),
				workflows.ErrTypeNoStream, nil)
		}
		heartbeat(ctx, "waiting for the CDC stream")
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Reload takes a reloaded worker configuration: its new shards are usable at
// once, and a shard whose DSN changed (every one, when the password did)
// reconnects on its next use. It returns the shards added.
func (a *Activities) Reload(shards map[string]string, password string) (added []string) {
	before := a.pools.r.Known()
	for n := range shards {
		if !slices.Contains(before, n) {
			added = append(added, n)
		}
	}
	slices.Sort(added)
	changed, pw := a.pools.r.Update(shards, password)
	switch {
	case pw:
		a.pools.drop()
	case len(changed) > 0:
		a.pools.drop(changed...)
	}
	return added
}

// SetStandbys takes the shards' standbys of the worker configuration (at
// start and at every reload): a changed one reconnects on its next use.
func (a *Activities) SetStandbys(standbys map[string]string) {
	changed := a.pools.r.SetStandbys(standbys)
	keys := make([]string, len(changed))
	for i, n := range changed {
		keys[i] = standbyKey(n)
	}
	if len(keys) > 0 {
		a.pools.drop(keys...)
	}
}

// Shards lists the shard names of the worker's configuration.
func (a *Activities) Shards() []string { return a.pools.r.Known() }

// heartbeat records details when running as an activity (and does nothing
// when called outside one, as in tests of the adapters).
func heartbeat(ctx context.Context, details ...any) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, details...)
	}
}

// keepBeating heartbeats every interval until the returned stop is called,
// for domain calls that report no progress of their own.
func keepBeating(ctx context.Context, interval time.Duration, details func() any) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	if hb := activity.GetInfo(ctx).HeartbeatTimeout; hb > 0 && hb/3 < interval {
		interval = hb / 3
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				d := details()
				if b, ok := d.(beats); ok {
					activity.RecordHeartbeat(ctx, b...)
				} else {
					activity.RecordHeartbeat(ctx, d)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// beats are heartbeat details of more than one value: keepBeating records
// them as separate details (an older reader of the first still decodes it).
type beats []any

// badInputError is input no retry can fix.
type badInputError struct{ msg string }

func (e *badInputError) Error() string    { return e.msg }
func (e *badInputError) StopKind() string { return pgerr.StopBadInput }

func badInput(format string, args ...any) error {
	return &badInputError{msg: fmt.Sprintf(format, args...)}
}

// classify is the one place that decides whether an activity error is worth
// a retry, and it asks the error: an error that names why it stops the move
// (pgerr.StopKind: bad input, a preflight problem, a collision, a schema
// change, a failover, a firing trigger) is non-retryable of that type; one
// that may go away by itself (pgerr.Retryable: its own Retryable method, a
// lost connection, a serialization failure, a deadlock, a server shutting
// down; or a concurrent CREATE) is retryable; SQL errors of classes
// 22/23/42 are bad input. Whatever is not recognised is passed on, and
// Temporal retries it.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) || errors.Is(err, context.Canceled) {
		return err
	}
	kind := pgerr.StopKind(err)
	if kind == "" && errors.As(err, new(*backfill.NotStandbyError)) {
		// backfill's error types do not name their stop yet: its files
		// were another engineer's while this was written.
		kind = pgerr.StopBadInput
	}
	switch {
	case kind != "":
		return temporal.NewNonRetryableApplicationError(err.Error(), kind, nil)
	case pgerr.Retryable(err), pgerr.DDLRace(err):
		return temporal.NewApplicationErrorWithCause(err.Error(), "Retryable", err)
	case pgerr.RowSecurity(err):
		return temporal.NewNonRetryableApplicationError(err.Error()+"; fix: "+pgerr.RowSecurityFix, workflows.ErrTypeBadInput, nil)
	case pgerr.FatalInput(err):
		return temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTypeBadInput, nil)
	}
	return err
}
