package tableset

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/reshard/reshard/internal/pgerr"
)

// DDLShard is one shard schema apply changes. Target: it is the target of a
// running move (it receives rows through an applier).
type DDLShard struct {
	Name   string
	Pool   *pgxpool.Pool
	Target bool
}

// DDLOptions bound how schema apply waits for the application.
type DDLOptions struct {
	// LockTimeout bounds each attempt's wait for the table's lock (default
	// 50ms): an ALTER TABLE queued behind a long transaction would queue every
	// application statement behind itself, so it gives up quickly instead.
	LockTimeout time.Duration
	// Budget is how long one shard may keep retrying a statement whose lock
	// it could not get (default 1m); attempts are spaced by a jittered,
	// growing delay (20ms to 2s).
	Budget time.Duration
}

// DDL outcomes, per shard and statement.
const (
	DDLApplied      = "applied"
	DDLAlreadyThere = "already there"
	DDLFailed       = "failed"
	DDLNotAttempted = "not attempted"
)

// DDLResult is what one statement did on one shard.
type DDLResult struct {
	Shard     string `json:"shard"`
	Statement string `json:"statement"`
	What      string `json:"what"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
}

// OrderShards is the order a statement of kind k reaches the shards: for an
// additive change the targets of running moves first (an applier never gets
// a column its target lacks), for a drop the targets last (the sources stop
// sending the column first); by name otherwise.
func OrderShards(shards []DDLShard, k DDLKind) []DDLShard {
	var first, last []DDLShard
	for _, s := range shards {
		if s.Target == (k == DDLAdditive) {
			first = append(first, s)
		} else {
			last = append(last, s)
		}
	}
	return append(first, last...)
}

// ApplyDDL runs each statement on every shard, in OrderShards' order, and
// reports what each did. It stops at the first failure: the shards after it
// are reported not attempted and the error is returned (running it again is
// safe: a change already there is reported so).
func ApplyDDL(ctx context.Context, stmts []DDL, shards []DDLShard, o DDLOptions) ([]DDLResult, error) {
	if o.LockTimeout <= 0 {
		o.LockTimeout = 50 * time.Millisecond
	}
	if o.Budget <= 0 {
		o.Budget = time.Minute
	}
	var out []DDLResult
	var failed error
	for _, d := range stmts {
		for _, s := range OrderShards(shards, d.Kind) {
			r := DDLResult{Shard: s.Name, Statement: d.SQL, What: d.What}
			if failed != nil {
				r.Outcome = DDLNotAttempted
				out = append(out, r)
				continue
			}
			outcome, attempts, err := applyOne(ctx, s.Pool, d, o)
			r.Outcome, r.Attempts = outcome, attempts
			if err != nil {
				r.Outcome, r.Reason = DDLFailed, err.Error()
				failed = fmt.Errorf("%s of %s on %s: %w", d.What, d.Table, s.Name, err)
			}
			out = append(out, r)
		}
	}
	return out, failed
}

// applyOne runs d on one shard, retrying while its lock is not to be had.
func applyOne(ctx context.Context, pool *pgxpool.Pool, d DDL, o DDLOptions) (string, int, error) {
	deadline := time.Now().Add(o.Budget)
	delay := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		outcome, err := tryOne(ctx, pool, d, o)
		if err == nil || !lockBusy(err) || time.Now().After(deadline) {
			if err != nil && lockBusy(err) {
				err = fmt.Errorf("%w (gave up after %d attempts in %s: a transaction holds %s; retry when it has ended)", err, attempt, o.Budget, d.Table)
			}
			return outcome, attempt, err
		}
		sleep := delay/2 + rand.N(delay)
		select {
		case <-ctx.Done():
			return "", attempt, ctx.Err()
		case <-time.After(sleep):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func lockBusy(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == pgerr.CodeLockNotAvailable || pe.Code == pgerr.CodeDeadlockDetected)
}

// shapeSQL fingerprints a table's columns (name, type, NOT NULL, default),
// so that a statement that changed nothing is reported "already there".
const shapeSQL = `SELECT coalesce(string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' ||
	coalesce(pg_get_expr(ad.adbin, ad.adrelid), ''), ', ' ORDER BY a.attnum), '')
FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`

func tryOne(ctx context.Context, pool *pgxpool.Pool, d DDL, o DDLOptions) (string, error) {
	if d.Concurrent {
		return createIndex(ctx, pool, d)
	}
	outcome := DDLApplied
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+strconv.FormatInt(o.LockTimeout.Milliseconds(), 10)+"ms'"); err != nil {
			return err
		}
		var before, after string
		if err := tx.QueryRow(ctx, shapeSQL, d.Table.Quoted()).Scan(&before); err != nil {
			return fmt.Errorf("read the columns of %s: %w", d.Table, err)
		}
		if _, err := tx.Exec(ctx, d.SQL); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && ((d.Kind == DDLAdditive && d.Column != "" && pe.Code == pgerr.CodeDuplicateColumn) || (d.Kind == DDLDrop && pe.Code == pgerr.CodeUndefinedColumn)) {
				return errAlreadyThere // the column is already added (42701) or already gone (42703)
			}
			return err
		}
		if err := tx.QueryRow(ctx, shapeSQL, d.Table.Quoted()).Scan(&after); err != nil {
			return fmt.Errorf("read the columns of %s: %w", d.Table, err)
		}
		if before == after {
			outcome = DDLAlreadyThere
		}
		return nil
	})
	if errors.Is(err, errAlreadyThere) {
		return DDLAlreadyThere, nil
	}
	return outcome, err
}

var errAlreadyThere = errors.New("already there")

// createIndex builds d's index CONCURRENTLY: its SHARE UPDATE EXCLUSIVE lock
// lets the application's reads and writes through, so it runs without the
// short lock_timeout. A build that failed earlier leaves an invalid index
// behind, which IF NOT EXISTS would take for done: it is dropped and built
// again.
func createIndex(ctx context.Context, pool *pgxpool.Pool, d DDL) (string, error) {
	var valid *bool
	err := pool.QueryRow(ctx, `SELECT i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
		WHERE c.relnamespace = $1::regnamespace AND c.relname = $2`, quoteIdent(d.Table.Schema), d.Index).Scan(&valid)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("look for index %s: %w", d.Index, err)
	}
	if valid != nil && *valid {
		return DDLAlreadyThere, nil
	}
	if valid != nil {
		if _, err := pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+pgx.Identifier{d.Table.Schema, d.Index}.Sanitize()); err != nil {
			return "", fmt.Errorf("drop the invalid index %s left by an earlier build: %w", d.Index, err)
		}
	}
	if _, err := pool.Exec(ctx, d.SQL); err != nil {
		return "", err
	}
	return DDLApplied, nil
}
