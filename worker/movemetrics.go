package worker

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// The move-state gauges: what the alert rules need to see a move that waits
// for an operator, a GRACE that overran, ranges left migrating. They are
// read at scrape time from the same state reshard status reads (each
// running Migration workflow's state query) and from the control database,
// at most once per moveStateEvery, so every worker of a cluster exports the
// same figures (alert on max(), not sum()).

// moveStateEvery bounds how often a scrape asks Temporal and the control
// database again; a scrape in between gets the last reading.
const moveStateEvery = 2 * time.Second

// gaugedPhases are the phases reshard_moves counts: a move's phases while
// its migration runs. Each is exported, 0 included, so that a series does
// not vanish when its last move leaves the phase.
var gaugedPhases = []workflows.Phase{
	workflows.PhasePlan, workflows.PhaseJoining, workflows.PhaseSnapshotCopy, workflows.PhaseCDCCatchUp,
	workflows.PhaseVerify, workflows.PhaseCutover, workflows.PhaseGrace, workflows.PhaseCleanup, workflows.PhaseRollingBack,
}

// Why a move is stopped for its operator (reshard_moves_stopped's reason).
const (
	stopVerifyFailed = "verify_failed" // waiting for reshard reverify or rollback
	stopStopped      = "stopped"       // a collision, a schema change, a failover: resume or rollback
)

// moveFigures are the gauges of one reading.
type moveFigures struct {
	Migrations    int                     // running migrations
	Phases        map[workflows.Phase]int // moves per phase
	Stopped       map[string]int          // moves stopped for the operator, by reason
	ApprovalWait  time.Duration           // longest wait for reshard approve
	GraceOverdue  time.Duration           // longest GRACE past its deadline
	Migrating     int                     // migrating ranges in the current topologies
	StatesMissing int                     // running migrations whose state no one answered
}

// figuresOf derives the gauges from the states of the running migrations
// at now.
func figuresOf(states []workflows.MigrationState, now time.Time) moveFigures {
	f := moveFigures{Migrations: len(states), Phases: map[workflows.Phase]int{}, Stopped: map[string]int{}}
	for _, st := range states {
		for _, m := range st.Moves {
			if m.Phase.Terminal() {
				continue
			}
			f.Phases[m.Phase]++
			switch {
			case m.Waiting == workflows.WaitVerdict:
				f.Stopped[stopVerifyFailed]++
			case m.Stopped:
				f.Stopped[stopStopped]++
			}
			if m.Waiting == workflows.WaitApproval && !m.UpdatedAt.IsZero() {
				f.ApprovalWait = max(f.ApprovalWait, now.Sub(m.UpdatedAt))
			}
			if m.Phase == workflows.PhaseGrace && !m.GraceUntil.IsZero() && now.After(m.GraceUntil) {
				f.GraceOverdue = max(f.GraceOverdue, now.Sub(m.GraceUntil))
			}
		}
	}
	return f
}

// moveStateCollector exports moveFigures.
type moveStateCollector struct {
	tc      client.Client
	control *topology.Store

	migrations, moves, stopped, approval, grace, migrating, missing *prometheus.Desc

	mu   sync.Mutex
	at   time.Time
	last moveFigures
	ok   bool
}

// NewMoveStateCollector exports the move-state gauges, read from tc's
// running migrations and control's topologies at scrape time.
func NewMoveStateCollector(tc client.Client, control *topology.Store) *moveStateCollector {
	return &moveStateCollector{tc: tc, control: control,
		migrations: prometheus.NewDesc("reshard_migrations_running",
			"Migration workflows running (Temporal's visibility store).", nil, nil),
		moves: prometheus.NewDesc("reshard_moves",
			"Moves of the running migrations in each phase (every phase exported, 0 included).", []string{"phase"}, nil),
		stopped: prometheus.NewDesc("reshard_moves_stopped",
			"Moves stopped until an operator acts: reason verify_failed (reshard reverify or rollback), stopped (a collision, a schema change, a failover: resume or rollback).", []string{"reason"}, nil),
		approval: prometheus.NewDesc("reshard_move_approval_wait_seconds",
			"The longest time a move has waited for reshard approve (since its state last changed); 0: none waits.", nil, nil),
		grace: prometheus.NewDesc("reshard_move_grace_overdue_seconds",
			"The longest time a move has stayed in GRACE past its deadline; 0: none.", nil, nil),
		migrating: prometheus.NewDesc("reshard_topology_migrating_ranges",
			"Ranges marked migrating in the current topology of every keyspace (control database).", nil, nil),
		missing: prometheus.NewDesc("reshard_migration_states_unanswered",
			"Running migrations whose state query no worker answered at the last reading (their moves are not counted).", nil, nil),
	}
}

func (c *moveStateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.migrations, c.moves, c.stopped, c.approval, c.grace, c.migrating, c.missing} {
		ch <- d
	}
}

func (c *moveStateCollector) Collect(ch chan<- prometheus.Metric) {
	f, ok := c.reading()
	if !ok {
		return // no reading: no series, rather than zeros that would mean "all is well"
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(c.migrations, float64(f.Migrations))
	for _, p := range gaugedPhases {
		g(c.moves, float64(f.Phases[p]), string(p))
	}
	for _, r := range []string{stopVerifyFailed, stopStopped} {
		g(c.stopped, float64(f.Stopped[r]), r)
	}
	g(c.approval, f.ApprovalWait.Seconds())
	g(c.grace, f.GraceOverdue.Seconds())
	g(c.migrating, float64(f.Migrating))
	g(c.missing, float64(f.StatesMissing))
}

// reading returns the last reading when it is recent, else reads again.
func (c *moveStateCollector) reading() (moveFigures, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && time.Since(c.at) < moveStateEvery {
		return c.last, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := c.read(ctx)
	if err != nil {
		c.ok = false
		return moveFigures{}, false
	}
	c.at, c.last, c.ok = time.Now(), f, true
	return f, true
}

func (c *moveStateCollector) read(ctx context.Context) (moveFigures, error) {
	ids, err := control.Running(ctx, c.tc)
	if err != nil {
		return moveFigures{}, err
	}
	var states []workflows.MigrationState
	missing := 0
	for _, id := range ids {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := c.tc.QueryWorkflow(qctx, id, "", workflows.QueryState)
		var st workflows.MigrationState
		if err == nil {
			err = v.Get(&st)
		}
		cancel()
		if err != nil {
			missing++
			continue
		}
		states = append(states, st)
	}
	f := figuresOf(states, time.Now())
	f.Migrations, f.StatesMissing = len(ids), missing
	n, err := c.control.MigratingRanges(ctx)
	if err != nil {
		return moveFigures{}, err
	}
	f.Migrating = n
	return f, nil
}
