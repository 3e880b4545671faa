package cutover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// PG is the real Actions of a cutover. Fencing, the in-flight wait and the
// marker are PostgreSQL work done here; the gates, the CDC drain and the
// topology publish belong to other packages and are passed in as functions
// by the caller that owns them (the activity layer).
type PG struct {
	Source, Target *pgxpool.Pool
	// From and To name Source and Target in the topology.
	From, To string
	Set      tableset.Set
	Ranges   []ring.Range
	Move     string
	// Fences derives both shards' fences from the control database: the
	// fence step records a hold on the source and reconciles it, the
	// unfence steps reconcile (fence.Reconcile is the only code that lifts
	// a fence).
	Fences fence.Control
	// Epoch is the attempt's (PGJournal.Claim): its hold carries it, so an
	// older attempt can neither replace nor release it.
	Epoch int64
	// Exclude are source backend pids of our own that the in-flight wait
	// ignores (none of them writes application rows).
	Exclude []int32
	// Advanced are the sequences the sequences step moved (for the report).
	Advanced []SequenceAdvance

	GatesFunc     func(ctx context.Context) error
	DrainFunc     func(ctx context.Context, marker string, budget time.Duration) error
	PublishFunc   func(ctx context.Context) (int64, error)
	PublishedFunc func(ctx context.Context) (bool, error)
}

var _ Actions = (*PG)(nil)

// Gates runs the caller's gates, then opens the connections the write
// pause will use (warm): nothing is fenced yet.
func (p *PG) Gates(ctx context.Context) error {
	if p.GatesFunc != nil {
		if err := p.GatesFunc(ctx); err != nil {
			return err
		}
	}
	return p.warm(ctx)
}

// controlPauseConns is how many control-database connections the write
// pause uses at once: the unfence step's reconcile reads the topology and
// the holds side by side (fence.Control.Want) while the source's hold is
// released (UnfenceTarget). The source's and the target's steps use one
// connection each at a time.
const controlPauseConns = 3

// warmFor bounds warm: pools shared with other moves' work (the worker's
// pool of a shard serves its copies, verifies and cutovers) may not have
// the connections free at once, and warm is worth no wait of its own.
var warmFor = time.Second

// warm opens, before the fence, the connections the write pause uses at
// once, so that none is opened inside it: a new connection is a TCP
// connect, a SCRAM exchange (PBKDF2 on both ends) and pgsession's check,
// and in the demo's four moves into one target (2026-12-04) the pools grew
// inside the pauses: two control-database connections opened during three
// moves' unfence steps held one reconcile's registry-row locks on the shared
// target for 256 ms while it waited 226 ms for its topology read, and the
// two sibling moves' unfence steps waited 232 ms and 86 ms for those rows.
// Acquiring the connections also refreshes them (pgxpool pings one idle
// for over a second when it is handed out), so the pause's first
// statements do not wait for a ping either. A pool that cannot give them
// all within warmFor is left as it is (the pause opens what it lacks, as
// before); a connection that cannot be opened fails the gates, before
// anything is fenced.
func (p *PG) warm(ctx context.Context) error {
	// By pool: two roles may share one (a test's), which then needs the
	// larger count, not a map literal's last.
	need := map[*pgxpool.Pool]int{}
	for _, w := range []struct {
		pool *pgxpool.Pool
		n    int
	}{{p.Source, 1}, {p.Target, 1}, {p.Fences.Pool, controlPauseConns}} {
		if w.pool != nil {
			need[w.pool] = max(need[w.pool], w.n)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, warmFor)
	defer cancel()
	g, gctx := errgroup.WithContext(wctx)
	for pool, n := range need {
		g.Go(func() error { return warmPool(gctx, pool, n) })
	}
	err := g.Wait()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil // busy pools: the pause opens what it lacks
	}
	if err != nil {
		return fmt.Errorf("open the connections of the write pause: %w", err)
	}
	return nil
}

// warmPool holds n connections of pool at once (at most its size), then
// releases them to it.
func warmPool(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, min(n, int(pool.Stat().MaxConns())))
	g, gctx := errgroup.WithContext(ctx)
	for i := range conns {
		g.Go(func() (err error) { conns[i], err = pool.Acquire(gctx); return err })
	}
	err := g.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	return err
}

// HoldName names a move's cutover hold on its source.
func HoldName(move string) string { return "cutover " + move }

func (p *PG) hold() string { return HoldName(p.Move) }

func (p *PG) FenceSource(ctx context.Context) error {
	if err := p.Fences.Hold(ctx, p.From, p.hold(), p.Epoch, p.Ranges); err != nil {
		return err
	}
	_, err := fence.Reconcile(ctx, p.Source, p.From, p.Set, p.Fences)
	return err
}

func (p *PG) WaitInFlight(ctx context.Context, budget time.Duration) error {
	horizon, err := fence.HorizonNow(ctx, p.Source)
	if err != nil {
		return err
	}
	return fence.WaitInFlight(ctx, p.Source, horizon, p.Exclude, budget)
}

func (p *PG) EmitMarker(ctx context.Context) (string, error) {
	marker := "cutover:" + p.Move + ":" + strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := EmitMarker(ctx, p.Source, marker); err != nil {
		return "", fmt.Errorf("emit marker on source: %w", err)
	}
	return marker, nil
}

// EmitMarker writes a transactional pg_logical_emit_message with cdc's
// prefix and payload, committed with synchronous_commit on: a walsender only
// sends flushed WAL, and on a server running with synchronous_commit = off
// the marker would otherwise wait up to wal_writer_delay (200 ms) for the
// WAL writer — inside the write pause.
//
// The transaction is one simple query, one round trip where BEGIN, SET,
// the message and COMMIT were four: it runs inside the write pause. A
// failure leaves the session in an aborted transaction, which the pool
// closes on release.
func EmitMarker(ctx context.Context, pool *pgxpool.Pool, payload string) error {
	_, err := pool.Exec(ctx, `BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_logical_emit_message(true, $1, $2); COMMIT`,
		pgx.QueryExecModeSimpleProtocol, cdc.MarkerPrefix, payload)
	return err
}

func (p *PG) Drain(ctx context.Context, marker string, budget time.Duration) error {
	if p.DrainFunc == nil {
		return fmt.Errorf("no CDC drain configured for move %s", p.Move)
	}
	if budget <= 0 {
		return fmt.Errorf("write-pause budget spent before the drain")
	}
	dctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	if err := p.DrainFunc(dctx, marker, budget); err != nil {
		return fmt.Errorf("drain CDC to marker %s: %w", marker, err)
	}
	return nil
}

// AdvanceSequences on the target, with the moved rows drained there and
// the ranges still fenced on both ends.
func (p *PG) AdvanceSequences(ctx context.Context) error {
	adv, err := AdvanceSequences(ctx, p.Target, p.Set)
	if err != nil {
		return fmt.Errorf("on target %s: %w", p.To, err)
	}
	p.Advanced = append(p.Advanced, adv...)
	return nil
}

func (p *PG) Publish(ctx context.Context) (int64, error) {
	if p.PublishFunc == nil {
		return 0, fmt.Errorf("no topology publisher configured for move %s", p.Move)
	}
	return p.PublishFunc(ctx)
}

func (p *PG) Published(ctx context.Context) (bool, error) {
	if p.PublishedFunc == nil {
		return false, fmt.Errorf("no topology reader configured for move %s", p.Move)
	}
	return p.PublishedFunc(ctx)
}

// UnfenceTarget, after the publish: the target owns the ranges now, so its
// reconcile lifts their fence; the source's hold is released (it no longer
// owns them, so its fence stays). The two run side by side, the write
// pause's last step: neither depends on the other once the publish has
// committed (the source's wanted fence holds the ranges with or without the
// hold, and the target's never holds them).
func (p *PG) UnfenceTarget(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		_, err := fence.Reconcile(gctx, p.Target, p.To, p.Set, p.Fences)
		return err
	})
	g.Go(func() error { return p.Fences.Release(gctx, p.From, p.hold(), p.Epoch) })
	return g.Wait()
}

// UnfenceSource, on abort: the hold is released and the source, still the
// owner, reconciled, which lifts the fence.
func (p *PG) UnfenceSource(ctx context.Context) error {
	if err := p.Fences.Release(ctx, p.From, p.hold(), p.Epoch); err != nil {
		return err
	}
	_, err := fence.Reconcile(ctx, p.Source, p.From, p.Set, p.Fences)
	return err
}
