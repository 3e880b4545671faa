package fence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Blocker is a session (a client backend or a background worker) or a
// prepared transaction that may have passed the fence trigger before the
// fence committed and has not ended yet.
type Blocker struct {
	PID int32
	// BackendType is pg_stat_activity.backend_type ("client backend",
	// "parallel worker", an extension's worker type such as "pg_cron"),
	// empty for a prepared transaction.
	BackendType string
	State       string
	XactStart   time.Time
	Application string
	Query       string // first 80 characters
}

func (b Blocker) String() string {
	who := b.Application
	if b.BackendType != "" && b.BackendType != "client backend" {
		who = strings.TrimSpace(b.BackendType + " " + who)
	}
	return fmt.Sprintf("pid %d (%s, %s, in transaction since %s): %s", b.PID, who, b.State, b.XactStart.Format(time.RFC3339), b.Query)
}

// systemBackends are the backend types (PostgreSQL 15, and the names later
// versions gave the same processes) the in-flight wait ignores: processes
// that never write application rows (walsenders, autovacuum, which only
// removes dead rows and analyzes, the auxiliary processes), and PostgreSQL's logical
// replication workers, which apply with session_replication_role = replica:
// the fence trigger does not fire for them, so waiting for them would only
// lengthen the pause (a table sync holds its transaction for its whole
// copy). Every other type can write through the trigger and is waited for:
// client backends, parallel workers (they share their leader's
// transaction) and the background workers of extensions, whatever their
// type is called (pg_cron's, when it runs jobs in background workers).
var systemBackends = []string{
	"walsender", "walreceiver", "walwriter", "checkpointer", "background writer", "archiver", "startup",
	"autovacuum launcher", "autovacuum worker",
	"logical replication launcher", "logical replication worker",
	"logical replication apply worker", "logical replication parallel worker", "logical replication tablesync worker",
	"slotsync worker", "walsummarizer", "io worker",
}

// OverBudgetError is returned when in-flight transactions did not end within
// the write-pause budget; the cutover must abort (unfence the source) and
// retry later.
type OverBudgetError struct {
	Waited   time.Duration
	Blockers []Blocker
}

func (e *OverBudgetError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "write-pause budget spent after %s: %d transaction(s) that began before the fence are still open", e.Waited.Round(time.Millisecond), len(e.Blockers))
	for i, bl := range e.Blockers {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Blockers)-3)
			break
		}
		b.WriteString("; ")
		b.WriteString(bl.String())
	}
	return b.String()
}

// Horizon is what the in-flight wait compares sessions with, taken right
// after the fence committed.
type Horizon struct {
	// Xmax is the xmax of a snapshot taken then, as a 32-bit xid text: every
	// transaction with an xid or a snapshot xmin older than it may have
	// passed the trigger without seeing the fence.
	Xmax string
	// Lockers are the virtual transaction ids of the transactions that held
	// ROW EXCLUSIVE on a table with a fence trigger then. Such a transaction
	// may keep running the fence function it compiled before the fence
	// (fenceBody: a prepared statement re-executed in it takes no new
	// lock, so its catalog cache is not refreshed) even without an xid or a
	// snapshot, as READ COMMITTED between two statements.
	Lockers []string
}

// HorizonNow returns the horizon of a fence: take it right after the fence
// committed.
func HorizonNow(ctx context.Context, pool *pgxpool.Pool) (Horizon, error) {
	var h Horizon
	// xid8 → xid by its low 32 bits: backend_xid and backend_xmin are
	// 32-bit xids, and age() compares them modulo wraparound. The lock
	// holders are read in the same statement; one that takes its lock later
	// processes the fence's invalidation messages, sent before the fence's
	// commit returned, and uses the new function.
	err := pool.QueryRow(ctx, `
		SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::numeric % 4294967296)::text,
			coalesce((SELECT array_agg(DISTINCT l.virtualtransaction)
				FROM pg_locks l JOIN pg_trigger g ON g.tgrelid = l.relation AND g.tgname = 'reshard_fence'
				WHERE l.locktype = 'relation' AND l.mode = 'RowExclusiveLock' AND l.granted
				  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				  AND l.pid IS DISTINCT FROM pg_backend_pid()), '{}')`).Scan(&h.Xmax, &h.Lockers)
	if err != nil {
		return Horizon{}, fmt.Errorf("read fence horizon: %w", err)
	}
	return h, nil
}

// InFlight lists the sessions — client backends and background workers —
// that may have passed the fence before it committed, or may still pass it:
// their transaction id or snapshot xmin is older than the horizon (including
// REPEATABLE READ transactions that have not written yet — their snapshot
// predates the fence), or their transaction is one of the horizon's lock
// holders; and the prepared transactions older than the horizon. The
// systemBackends, the excluded pids (our own sessions) and the parallel
// workers of those are not counted.
func InFlight(ctx context.Context, pool *pgxpool.Pool, horizon Horizon, exclude []int32) ([]Blocker, error) {
	lockers := horizon.Lockers
	if lockers == nil {
		lockers = []string{}
	}
	// Prepared transactions (two-phase commit) have no session in
	// pg_stat_activity: one prepared before the fence may still commit
	// writes that passed the trigger, so it is waited for too (pid 0).
	rows, err := pool.Query(ctx, `
		SELECT pid, backend_type, state, xact_start, application_name, query FROM (
			SELECT pid, coalesce(backend_type, '') AS backend_type, coalesce(state, '') AS state, coalesce(xact_start, now()) AS xact_start,
			       coalesce(application_name, '') AS application_name, left(coalesce(query, ''), 80) AS query
			FROM pg_stat_activity
			WHERE coalesce(backend_type, '') <> ALL($4::text[])
			  AND coalesce(leader_pid, pid) <> pg_backend_pid()
			  AND coalesce(leader_pid, pid) <> ALL(coalesce($2::int4[], '{}'))
			  AND ((backend_xid IS NOT NULL AND age(backend_xid) > age($1::xid))
			    OR (backend_xmin IS NOT NULL AND age(backend_xmin) > age($1::xid))
			    OR pid IN (SELECT pid FROM pg_locks WHERE locktype = 'virtualxid' AND virtualxid = ANY($3::text[])))
			UNION ALL
			SELECT 0, '', 'prepared', prepared, 'two-phase commit', left('PREPARE TRANSACTION ' || quote_literal(gid), 80)
			FROM pg_prepared_xacts
			WHERE database = current_database() AND age(transaction) > age($1::xid)
		) b
		ORDER BY xact_start, pid`, horizon.Xmax, exclude, lockers, systemBackends)
	if err != nil {
		return nil, fmt.Errorf("list in-flight transactions: %w", err)
	}
	defer rows.Close()
	var out []Blocker
	for rows.Next() {
		var b Blocker
		if err := rows.Scan(&b.PID, &b.BackendType, &b.State, &b.XactStart, &b.Application, &b.Query); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// WaitInFlight waits until no transaction InFlight names is open, polling
// every 2 ms for the first 50 ms (a cutover's write pause lasts as long as
// this wait, and the transactions it waits for are mostly the
// application's short writes: a doubling delay found one that ended at 3 ms
// only at 6 ms, one that ended at 15 ms at 30), then less and less often
// (up to every 50 ms), for at most budget. Over budget it returns an
// *OverBudgetError naming the sessions still open.
func WaitInFlight(ctx context.Context, pool *pgxpool.Pool, horizon Horizon, exclude []int32, budget time.Duration) error {
	start := time.Now()
	deadline := start.Add(budget)
	delay := 2 * time.Millisecond
	for {
		bl, err := InFlight(ctx, pool, horizon, exclude)
		if err != nil {
			return err
		}
		if len(bl) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return &OverBudgetError{Waited: time.Since(start), Blockers: bl}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond && time.Since(start) > 50*time.Millisecond {
			delay *= 2
		}
	}
}
