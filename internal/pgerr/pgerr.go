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

// The SQLSTATEs reshard compares, by their PostgreSQL names (Appendix A of
// the manual); no package writes one as a literal.
const (
	CodeRestrictViolation     = "23001" // restrict_violation
	CodeNotNullViolation      = "23502" // not_null_violation
	CodeUniqueViolation       = "23505" // unique_violation
	CodeInvalidSchemaName     = "3F000" // invalid_schema_name
	CodeSerializationFailure  = "40001" // serialization_failure
	CodeDeadlockDetected      = "40P01" // deadlock_detected
	CodeInsufficientPrivilege = "42501" // insufficient_privilege
	CodeUndefinedColumn       = "42703" // undefined_column
	CodeDuplicateColumn       = "42701" // duplicate_column
	CodeDatatypeMismatch      = "42804" // datatype_mismatch
	CodeInvalidBinaryRepr     = "22P03" // invalid_binary_representation
	CodeUndefinedObject       = "42704" // undefined_object
	CodeUndefinedTable        = "42P01" // undefined_table
	CodeDuplicateTable        = "42P07" // duplicate_table
	CodeDuplicateObject       = "42710" // duplicate_object
	CodeObjectInUse           = "55006" // object_in_use
	CodeLockNotAvailable      = "55P03" // lock_not_available
	CodeAdminShutdown         = "57P01" // admin_shutdown
	CodeCrashShutdown         = "57P02" // crash_shutdown
	CodeCannotConnectNow      = "57P03" // cannot_connect_now
	CodeQueryCanceled         = "57014" // query_canceled (statement_timeout among others)
	CodeNoDataFound           = "P0002" // no_data_found (plpgsql's STRICT INTO)
	// CodeFenced is reshard's own: a fence refused a write to a range the
	// shard does not own (or not yet); a router refreshes its topology and
	// retries on the owner (DESIGN.md §3).
	CodeFenced = "RSF01"
	// CodeTruncateRefused is reshard's own too: a TRUNCATE guard refused a
	// TRUNCATE of a table a live move streams from or into.
	CodeTruncateRefused = "RST01"
)

// The classes of SQLSTATEs (their first two characters) reshard compares.
const (
	ClassConnectionException   = "08" // connection_exception
	ClassDataException         = "22" // data_exception
	ClassIntegrityViolation    = "23" // integrity_constraint_violation
	ClassInvalidAuthorization  = "28" // invalid_authorization_specification
	ClassSyntaxOrAccess        = "42" // syntax_error_or_access_rule_violation
	ClassInsufficientResources = "53" // insufficient_resources
)

// Class is code's class: its first two characters ("" for a shorter code).
func Class(code string) string {
	if len(code) < 2 {
		return ""
	}
	return code[:2]
}

// Code is err's SQLSTATE; "" when err is no server error.
func Code(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// RetryableSQLState reports a server error that goes away by itself:
// connection exceptions (class 08), insufficient resources (53), a
// serialization failure or a deadlock (40001, 40P01), an administrator or
// crash shutdown or a server starting up (57P01-57P03), and an object in use
// (55006: a replication slot or origin still held by a session that is
// ending).
func RetryableSQLState(code string) bool {
	switch {
	case Class(code) == ClassConnectionException, Class(code) == ClassInsufficientResources,
		code == CodeSerializationFailure, code == CodeDeadlockDetected,
		code == CodeAdminShutdown, code == CodeCrashShutdown, code == CodeCannotConnectNow,
		code == CodeObjectInUse:
		return true
	}
	return false
}

// ConnectionLost reports an error that ended the session rather than the
// server's answer to a statement: end of stream, reset, closed or timed-out
// connections, connection exceptions (class 08) and a server shutting down
// or starting up (57P01-57P03). A serialization failure, a deadlock or a
// resource limit (53) is an answer: the session goes on (Retryable says
// whether to try the statement again).
func ConnectionLost(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch c := pgErr.Code; {
		case Class(c) == ClassConnectionException, c == CodeAdminShutdown, c == CodeCrashShutdown, c == CodeCannotConnectNow:
			return true
		}
		return false
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

// retrier is an error that says itself whether a retry may succeed, as
// pgx's errors answer pgconn.SafeToRetry: the domain packages' error types
// (cdc's lost connection, schema change and failover, backfill's moved
// checkpoint, the collisions here) implement it, so that one predicate,
// Retryable, classifies every error.
type retrier interface{ Retryable() bool }

// Retryable reports whether err may go away by itself: an error that says
// so (its Retryable method), a retryable server state or a lost
// connection. A cancelled or expired context is not: the caller stopped.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var r retrier
	if errors.As(err, &r) {
		return r.Retryable()
	}
	if errors.Is(err, context.DeadlineExceeded) || Collision(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return RetryableSQLState(pgErr.Code)
	}
	return ConnectionLost(err)
}

// The kinds of stop: why an error stops a move until someone acts, which
// the workflow reads from the activity error's type (workflows.ErrType*
// spells the same strings; activities' TestStopKindsAreTheWorkflows holds
// them equal, as the workflows import no data-plane package).
const (
	StopBadInput      = "BadInput"        // input or configuration to fix
	StopPreflight     = "PreflightFailed" // a PLAN check failed
	StopCollision     = "Collision"       // a row of the target has the moving row's key
	StopSchemaChange  = "SchemaChange"    // DDL on the source during the move
	StopFailedOver    = "FailedOver"      // a side of the move is another server now
	StopFiringTrigger = "FiringTrigger"   // a trigger fires for reshard's writes
)

// stopper is an error that names why it stops a move, as retrier says
// whether a retry may succeed: the domain packages' error types answer it
// themselves, so the activities' classification asks one predicate.
type stopper interface{ StopKind() string }

// StopKind is the kind of stop err names (the StopKind method of the first
// error of its chain that has one), or "" when it names none.
func StopKind(err error) string {
	var s stopper
	if errors.As(err, &s) {
		return s.StopKind()
	}
	return ""
}

// InputError is what the caller asked for refused by what it names (a
// file, a table, a definition): no retry changes the answer, and nothing
// was changed. The CLI exits 2 on it.
type InputError struct{ Err error }

func (e *InputError) Error() string   { return e.Err.Error() }
func (e *InputError) Unwrap() error   { return e.Err }
func (e *InputError) Retryable() bool { return false }

// BadInput is an *InputError of the formatted message.
func BadInput(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// FatalInput reports SQL errors of classes 22 (data), 23 (integrity) and 42
// (syntax, undefined object, privilege): retrying them changes nothing.
func FatalInput(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch Class(pgErr.Code) {
	case ClassDataException, ClassIntegrityViolation, ClassSyntaxOrAccess:
		return true
	}
	return false
}

// Privilege reports a statement refused for want of a privilege (SQLSTATE
// 42501, insufficient_privilege): the role needs a GRANT, not a retry.
func Privilege(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == CodeInsufficientPrivilege
}

// RowSecurity reports a statement refused because a row-level security
// policy would have filtered it: reshard's sessions run with row_security
// off (internal/pgsession), so that a policy never hides rows from a copy,
// a verify or a cleanup. RowSecurityFix says what to grant.
func RowSecurity(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == CodeInsufficientPrivilege && strings.Contains(pgErr.Message, "row-level security")
}

// RowSecurityFix is the fix of a RowSecurity error.
const RowSecurityFix = "reshard must see every row of the tables it moves: as a superuser, ALTER ROLE <the role reshard connects as> BYPASSRLS (deploy/reshard-role.sql grants it; docs/operations.md, Privileges)"

// UndefinedObject reports a statement naming an object, such as a role,
// that does not exist (SQLSTATE 42704).
func UndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == CodeUndefinedObject
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
	case CodeUniqueViolation:
		return strings.HasPrefix(pgErr.ConstraintName, "pg_")
	case CodeDuplicateTable, CodeDuplicateObject:
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

// Retryable: a collision stays until the operator changes a row.
func (e *CollisionError) Retryable() bool { return false }

// StopKind: the operator gives one of the two rows another key.
func (e *CollisionError) StopKind() string { return StopCollision }

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

// Retryable: a unique violation stays until the operator changes a row.
func (e *UniqueError) Retryable() bool { return false }

// StopKind: a collision, as a CollisionError.
func (e *UniqueError) StopKind() string { return StopCollision }

// Unique returns err as a *UniqueError when it is a unique violation
// (23505) on a constraint of a table outside the system catalogs, and err
// unchanged otherwise.
func Unique(err error) error {
	var pgErr *pgconn.PgError
	var ue *UniqueError
	if !errors.As(err, &pgErr) || pgErr.Code != CodeUniqueViolation || DDLRace(err) || errors.As(err, &ue) {
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

// RecoveryConflict reports a statement a hot standby cancelled because
// replaying the primary's WAL needed what it held (a row version vacuumed
// on the primary, a lock): SQLSTATE 40001 or 40P01 with "conflict with
// recovery". The same statement usually succeeds when run again.
func RecoveryConflict(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return (pgErr.Code == CodeSerializationFailure || pgErr.Code == CodeDeadlockDetected) &&
		strings.Contains(pgErr.Message, "conflict with recovery")
}
