package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
)

// CollisionError is pgerr's: a change would overwrite a row the target
// owns (see there).
type CollisionError = pgerr.CollisionError

// SchemaChangeError: the source announced a table shape (Relation message)
// that no longer matches the target: DDL happened during the move. Not
// retryable until the schemas match again.
type SchemaChangeError struct {
	Table       string
	OnlySource  []string // columns the source sends that the target lacks
	OnlyTarget  []string // target columns the source no longer sends
	TypeChanged []string // "col: source type oid X, target Y"
}

func (e *SchemaChangeError) Error() string {
	var parts []string
	if len(e.OnlySource) > 0 {
		parts = append(parts, "columns only on the source: "+strings.Join(e.OnlySource, ", "))
	}
	if len(e.OnlyTarget) > 0 {
		parts = append(parts, "columns only on the target: "+strings.Join(e.OnlyTarget, ", "))
	}
	if len(e.TypeChanged) > 0 {
		parts = append(parts, "types differ: "+strings.Join(e.TypeChanged, "; "))
	}
	return fmt.Sprintf("schema of %s changed on the source during the move (%s): apply the same DDL on the target, then restart the stream",
		e.Table, strings.Join(parts, "; "))
}

// Retryable: not until the schemas match again, which an operator does.
func (e *SchemaChangeError) Retryable() bool { return false }

// StopKind: the operator applies the DDL on the target.
func (e *SchemaChangeError) StopKind() string { return pgerr.StopSchemaChange }

// ConnError is a lost or refused connection: retry the stream, it resumes
// from the target's replication origin.
type ConnError struct {
	Op  string
	Err error
}

func (e *ConnError) Error() string { return e.Op + ": connection lost: " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// Retryable: a new stream resumes from the target's replication origin.
func (e *ConnError) Retryable() bool { return true }

// wrapOp names what was being done and marks connection loss as retryable.
func wrapOp(op string, err error) error {
	if err == nil {
		return nil
	}
	err = pgerr.Unique(err)
	var ce *CollisionError
	var se *SchemaChangeError
	var conn *ConnError
	var wait *tableset.ColumnWaitError
	var gone *ColumnVanishedError
	if undefinedColumn(err) && !errors.As(err, &gone) {
		return &ColumnVanishedError{Op: op, Err: err}
	}
	if errors.As(err, &ce) || errors.As(err, &se) || errors.As(err, &conn) || errors.As(err, &wait) || errors.As(err, &gone) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if pgerr.ConnectionLost(err) {
		return &ConnError{Op: op, Err: err}
	}
	return fmt.Errorf("%s: %w", op, err)
}
