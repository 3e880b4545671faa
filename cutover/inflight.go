package cutover

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Blocker is a client session that may have passed the fence trigger before
// the fence committed and has not ended yet.
type Blocker struct {
	PID         int32
	State       string
	XactStart   time.Time
	Application string
	Query       string // first 80 characters
}

func (b Blocker) String() string {
	return fmt.Sprintf("pid %d (%s, %s, in transaction since %s): %s", b.PID, b.Application, b.State, b.XactStart.Format(time.RFC3339), b.Query)
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

// FenceHorizon returns the xmax of a snapshot taken now, as a 32-bit xid
// text. Take it right after the fence committed: every transaction with an
// xid or a snapshot xmin older than it may have passed the trigger without
// seeing the fence.
func FenceHorizon(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var xmax string
	// xid8 → xid by its low 32 bits: backend_xid and backend_xmin are
	// 32-bit xids, and age() compares them modulo wraparound.
	err := pool.QueryRow(ctx, `SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::numeric % 4294967296)::text`).Scan(&xmax)
	if err != nil {
		return "", fmt.Errorf("read fence horizon: %w", err)
	}
	return xmax, nil
}

// InFlight lists client sessions whose transaction id or snapshot xmin is
// older than horizon: those may have passed the fence before it committed
// (including REPEATABLE READ transactions that have not written yet — their
// snapshot does not see the fence). Walsenders, autovacuum and the excluded
// pids (our own sessions) are not counted.
func InFlight(ctx context.Context, pool *pgxpool.Pool, horizon string, exclude []int32) ([]Blocker, error) {
	rows, err := pool.Query(ctx, `
		SELECT pid, coalesce(state, ''), coalesce(xact_start, now()), coalesce(application_name, ''), left(coalesce(query, ''), 80)
		FROM pg_stat_activity
		WHERE backend_type = 'client backend'
		  AND pid <> pg_backend_pid()
		  AND pid <> ALL(coalesce($2::int4[], '{}'))
		  AND ((backend_xid IS NOT NULL AND age(backend_xid) > age($1::xid))
		    OR (backend_xmin IS NOT NULL AND age(backend_xmin) > age($1::xid)))
		ORDER BY xact_start`, horizon, exclude)
	if err != nil {
		return nil, fmt.Errorf("list in-flight transactions: %w", err)
	}
	defer rows.Close()
	var out []Blocker
	for rows.Next() {
		var b Blocker
		if err := rows.Scan(&b.PID, &b.State, &b.XactStart, &b.Application, &b.Query); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// WaitInFlight waits until no transaction older than horizon is open, polling
// every few milliseconds, for at most budget. Over budget it returns an
// *OverBudgetError naming the sessions still open.
func WaitInFlight(ctx context.Context, pool *pgxpool.Pool, horizon string, exclude []int32, budget time.Duration) error {
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
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}
