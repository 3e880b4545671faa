package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PublicationSQL renders the publication's table list: every table of the set,
// with a PG15 row filter on the moving ranges when the shard key is in the
// table's replica identity (a row filter may only use identity columns when
// UPDATE and DELETE are published); other tables are filtered by the stream.
func PublicationSQL(set tableset.Set, ranges []ring.Range) string {
	parts := make([]string, 0, len(set.Tables))
	for _, t := range set.Tables {
		p := "TABLE " + t.Quoted()
		if t.KeyInIdentity() {
			p += " WHERE (" + ring.Predicate(t.TokenSQL(""), ranges) + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// CreatePublication creates, or brings back to the wanted definition, the
// move's publication on the source: the set's tables with row filters, and
// publish = 'insert, update, delete' — never truncate, which ignores row
// filters. Idempotent.
func CreatePublication(ctx context.Context, conn Querier, name string, set tableset.Set, ranges []ring.Range) error {
	if err := validName("publication", name); err != nil {
		return err
	}
	if len(set.Tables) == 0 {
		return fmt.Errorf("create publication %s: table set %q has no tables", name, set.Name)
	}
	ident := pgx.Identifier{name}.Sanitize()
	tables := PublicationSQL(set, ranges)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, name).Scan(&exists); err != nil {
		return wrapOp("look up publication "+name, err)
	}
	if !exists {
		_, err := conn.Exec(ctx, "CREATE PUBLICATION "+ident+" FOR "+tables+" WITH (publish = 'insert, update, delete')")
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeDuplicateObject { // created concurrently: fall through to ALTER
			exists = true
		} else if err != nil {
			return wrapOp("create publication "+name, err)
		}
	}
	if exists {
		if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+ident+" SET "+tables); err != nil {
			return wrapOp("alter publication "+name, err)
		}
		if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+ident+" SET (publish = 'insert, update, delete')"); err != nil {
			return wrapOp("alter publication "+name, err)
		}
	}
	return nil
}

// DropPublication drops the publication if it exists.
func DropPublication(ctx context.Context, conn Querier, name string) error {
	if err := validName("publication", name); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{name}.Sanitize())
	return wrapOp("drop publication "+name, err)
}

// CreateSlot creates the move's logical slot (pgoutput) on a replication
// connection (replication=database) and returns its consistent point L0 —
// the caller records it; the stream starts there — and the name of the
// snapshot exported at L0, valid only until the next command on replConn.
// Create it before any row is copied (DESIGN.md §4.2). If the slot already
// exists, it returns its confirmed_flush_lsn and no snapshot. From
// PostgreSQL 17 on it is a failover slot (slotCommand).
func CreateSlot(ctx context.Context, replConn *pgconn.PgConn, name string) (pglogrepl.LSN, string, error) {
	if err := validName("slot", name); err != nil {
		return 0, "", err
	}
	if lsn, ok, err := existingSlot(ctx, replConn, name); err != nil || ok {
		return lsn, "", err
	}
	version, err := serverVersionNum(ctx, replConn)
	if err != nil {
		return 0, "", err
	}
	res, err := pglogrepl.ParseCreateReplicationSlot(replConn.Exec(ctx, slotCommand(name, version)))
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeDuplicateObject { // created concurrently
			lsn, ok, err2 := existingSlot(ctx, replConn, name)
			if err2 == nil && ok {
				return lsn, "", nil
			}
		}
		return 0, "", wrapOp("create replication slot "+name, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, "", fmt.Errorf("create replication slot %s: consistent point %q: %w", name, res.ConsistentPoint, err)
	}
	return lsn, res.SnapshotName, nil
}

func existingSlot(ctx context.Context, conn *pgconn.PgConn, name string) (pglogrepl.LSN, bool, error) {
	// Replication connections take simple queries only, hence the quoting.
	q := "SELECT plugin, slot_type, database = current_database(), coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots WHERE slot_name = " + quoteLiteral(name)
	rows, err := conn.Exec(ctx, q).ReadAll()
	if err != nil {
		return 0, false, wrapOp("look up replication slot "+name, err)
	}
	if len(rows) == 0 || len(rows[0].Rows) == 0 {
		return 0, false, nil
	}
	r := rows[0].Rows[0]
	if string(r[0]) != "pgoutput" || string(r[1]) != "logical" || string(r[2]) != "t" {
		return 0, false, fmt.Errorf("replication slot %s exists but is not a pgoutput logical slot of this database (plugin %q, type %q): drop it or pick another move id", name, r[0], r[1])
	}
	lsn, err := pglogrepl.ParseLSN(string(r[3]))
	if err != nil {
		return 0, false, fmt.Errorf("replication slot %s: confirmed_flush_lsn %q: %w", name, r[3], err)
	}
	return lsn, true, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// DropSlot drops the slot if it exists, waiting up to 10 s for a stream that
// is shutting down to release it. Connect with a plain (non-replication)
// session.
func DropSlot(ctx context.Context, conn Querier, name string) error {
	if err := validName("slot", name); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var active *bool
		err := conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return wrapOp("look up replication slot "+name, err)
		}
		if !*active {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, name)
			var pgErr *pgconn.PgError
			if err == nil || !(errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeObjectInUse) {
				return wrapOp("drop replication slot "+name, err)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop replication slot %s: still in use by a stream after 10 s: stop the stream first", name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop replication slot %s: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DropOrigin drops the stream's replication origin on the target if it
// exists (cleanup and rollback).
func DropOrigin(ctx context.Context, conn Querier, name string) error {
	if err := validName("origin", name); err != nil {
		return err
	}
	// An applier that was just stopped may still hold the origin in its
	// session for a moment while its connection closes: wait for it, as
	// DropSlot does for an active slot.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := conn.Exec(ctx, `SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname = $1`, name)
		var pgErr *pgconn.PgError
		if err == nil || !(errors.As(err, &pgErr) && pgErr.Code == pgerr.CodeObjectInUse) {
			return wrapOp("drop replication origin "+name, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop replication origin %s: still in use by an applier session after 10 s: stop the stream first: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// SlotStat is one row of pg_replication_slots, as the metrics need it.
type SlotStat struct {
	Active            bool
	WALStatus         string // reserved, extended, unreserved, lost
	RestartLSN        pglogrepl.LSN
	ConfirmedFlushLSN pglogrepl.LSN
	RetainedBytes     int64  // WAL kept for the slot: current LSN - restart_lsn
	SafeWALSize       *int64 // bytes left before max_slot_wal_keep_size loses the slot; nil when unlimited
}

// SlotStats reads the slot's state on its server.
func SlotStats(ctx context.Context, conn Querier, slot string) (SlotStat, error) {
	var st SlotStat
	var restart, confirmed string
	err := conn.QueryRow(ctx, `
		SELECT active, coalesce(wal_status, ''), coalesce(restart_lsn::text, '0/0'), coalesce(confirmed_flush_lsn::text, '0/0'),
		       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, slot).
		Scan(&st.Active, &st.WALStatus, &restart, &confirmed, &st.RetainedBytes, &st.SafeWALSize)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("replication slot %s does not exist", slot)
	}
	if err != nil {
		return st, wrapOp("read replication slot "+slot, err)
	}
	if st.RestartLSN, err = pglogrepl.ParseLSN(restart); err != nil {
		return st, err
	}
	st.ConfirmedFlushLSN, err = pglogrepl.ParseLSN(confirmed)
	return st, err
}
