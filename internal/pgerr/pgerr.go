// Package pgerr is the one vocabulary of PostgreSQL and connection errors:
// one predicate per behaviour (as pgconn.SafeToRetry is), used by every
// package that talks to a server and by the activities' classification.
package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// RetryableSQLState reports a server error that goes away by itself:
// connection exceptions (class 08), insufficient resources (53), a
// serialization failure or a deadlock (40001, 40P01), an administrator or
// crash shutdown or a server starting up (57P01-57P03), and an object in use
// (55006: a replication slot or origin still held by a session that is
// ending).
func RetryableSQLState(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"),
		code == "40001", code == "40P01",
		code == "57P01", code == "57P02", code == "57P03",
		code == "55006":
		return true
	}
	return false
}

// ConnectionLost reports an error of the connection itself rather than of
// a statement: end of stream, reset, closed or timed-out connections, and
// the retryable server states above.
func ConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return RetryableSQLState(pgErr.Code)
	}
	var netErr net.Error
	var timeout interface{ Timeout() bool }
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, &netErr) || errors.As(err, &timeout) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	s := err.Error()
	for _, m := range []string{"conn closed", "conn busy", "connection reset", "broken pipe", "unexpected EOF"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// Retryable reports whether err may go away by itself: a retryable server
// state or a lost connection. A cancelled or expired context is not: the
// caller stopped.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || Collision(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return RetryableSQLState(pgErr.Code)
	}
	return ConnectionLost(err)
}

// FatalInput reports SQL errors of classes 22 (data), 23 (integrity) and 42
// (syntax, undefined object, privilege): retrying them changes nothing.
func FatalInput(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) < 2 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "42":
		return true
	}
	return false
}

// Privilege reports a statement refused for want of a privilege (SQLSTATE
// 42501, insufficient_privilege): the role needs a GRANT, not a retry.
func Privilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// RowSecurity reports a statement refused because a row-level security
// policy would have filtered it: reshard's sessions run with row_security
// off (internal/pgsession), so that a policy never hides rows from a copy,
// a verify or a cleanup. RowSecurityFix says what to grant.
func RowSecurity(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501" && strings.Contains(pgErr.Message, "row-level security")
}

// RowSecurityFix is the fix of a RowSecurity error.
const RowSecurityFix = "reshard must see every row of the tables it moves: as a superuser, ALTER ROLE <the role reshard connects as> BYPASSRLS (deploy/reshard-role.sql grants it; docs/operations.md, Privileges)"

// UndefinedObject reports a statement naming an object, such as a role,
// that does not exist (SQLSTATE 42704).
func UndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}

// DDLRace reports the errors of two sessions creating the same object at
// once (CREATE ... IF NOT EXISTS is not safe against a concurrent creator):
// a unique violation on a system catalog, or the object already existing.
// A retry finds the object there.
func DDLRace(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505":
		return strings.HasPrefix(pgErr.ConstraintName, "pg_")
	case "42P07", "42710": // duplicate_table, duplicate_object
		return true
	}
	return false
}

// CollisionError is a primary-key collision between shards: a row of the
// moving ranges (copied or changed on the source) has the primary key of a
// row the target holds outside them, a row the target owns. reshard never
// overwrites it; the move stops until the operator gives one of the two rows
// another key. Copy (backfill) and catch-up (cdc) report it alike.
type CollisionError struct {
	Table string // schema.table
	Key   string // the primary key, as column=value pairs: "id=42"
	// TargetShardKey is the shard key of the target's row, when known.
	TargetShardKey string
	// Detail is the server's detail, when the collision surfaced as a
	// unique violation.
	Detail string
}

func (e *CollisionError) Error() string {
	whose := ""
	if e.TargetShardKey != "" {
		whose = " (shard key " + e.TargetShardKey + ")"
	}
	detail := ""
	if e.Detail != "" {
		detail = " [" + e.Detail + "]"
	}
	return "primary-key collision in " + e.Table + ": the target already has a row with " + e.Key + whose + detail +
		" outside the moving ranges, so it belongs to the target; reshard will not overwrite it and the move is stopped: " +
		"give one of the two rows another key (per-shard sequences must not overlap; where a shard is fenced, make the change with " +
		"SET session_replication_role = replica) and resume"
}

// UniqueError is a unique violation met by reshard's writes on a constraint
// of an application table (a unique index beyond the primary key, most
// often): a moved row and a row the target holds have the same value. Like
// a CollisionError it is never overwritten and stops the move; it says the
// constraint, the key and the value (the server's detail), which the bare
// PostgreSQL message leaves out.
type UniqueError struct {
	Table      string // schema.table
	Constraint string
	// Detail is the server's "Key (email)=(a@example.com) already exists.";
	// empty when the role may not read the key's columns.
	Detail string
	Err    *pgconn.PgError
}

func (e *UniqueError) Error() string {
	detail := strings.TrimSuffix(e.Detail, ".")
	if detail == "" {
		detail = "the server named no key (the role may not read its columns)"
	}
	return fmt.Sprintf("unique constraint %q of %s: %s on the target: a row reshard wrote and a row the target holds have the same value; "+
		"reshard will not overwrite it and the move is stopped: give one of the two rows another value (where a shard is fenced, make the change with "+
		"SET session_replication_role = replica) and resume", e.Constraint, e.Table, detail)
}

func (e *UniqueError) Unwrap() error { return e.Err }

// Unique returns err as a *UniqueError when it is a unique violation
// (23505) on a constraint of a table outside the system catalogs, and err
// unchanged otherwise.
func Unique(err error) error {
	var pgErr *pgconn.PgError
	var ue *UniqueError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || DDLRace(err) || errors.As(err, &ue) {
		return err
	}
	table := pgErr.TableName
	if pgErr.SchemaName != "" {
		table = pgErr.SchemaName + "." + table
	}
	return &UniqueError{Table: table, Constraint: pgErr.ConstraintName, Detail: pgErr.Detail, Err: pgErr}
}

// Collision reports a collision between shards, on the primary key or on
// another unique constraint: never retryable.
func Collision(err error) bool {
	var ce *CollisionError
	var ue *UniqueError
	return errors.As(err, &ce) || errors.As(err, &ue)
}
