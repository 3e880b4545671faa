package cdc

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
)

// Every stream error answers pgerr.Retryable itself: the activities'
// classify asks that one predicate.
func TestStreamErrorsSayIfRetryable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"lost connection", wrapOp("receive", io.ErrUnexpectedEOF), true},
		{"connection error over a deadline", &ConnError{Op: "hold", Err: context.DeadlineExceeded}, true},
		{"schema change", fmt.Errorf("apply: %w", &SchemaChangeError{Table: "public.t", OnlySource: []string{"c"}}), false},
		{"failed over", &FailedOverError{Source: "s", SlotLost: true}, false},
		{"collision", wrapOp("apply", &CollisionError{Table: "t", Key: "id=1"}), false},
		{"serialization failure", wrapOp("apply", &pgconn.PgError{Code: pgerr.CodeSerializationFailure}), true},
		{"bad data", wrapOp("apply", &pgconn.PgError{Code: "22P02"}), false},
		{"cancelled", wrapOp("apply", context.Canceled), false},
	} {
		if got := pgerr.Retryable(tc.err); got != tc.want {
			t.Errorf("%s (%v): Retryable = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// A peek falls back to the walsender on the server's answer to it (a
// resource limit such as temp_file_limit, a statement timeout), never on a
// session that ended (pgerr.ConnectionLost).
func TestFallBackOnTheServersAnswerOnly(t *testing.T) {
	for _, tc := range []struct {
		code string
		want bool
	}{
		{"53400", true},  // configuration_limit_exceeded: temp_file_limit
		{"57014", true},  // query_canceled: statement_timeout
		{"08006", false}, // connection_failure
		{pgerr.CodeAdminShutdown, false},
	} {
		err := fmt.Errorf("read: %w", &peekError{err: &pgconn.PgError{Code: tc.code}})
		if got := fallBack(err); got != tc.want {
			t.Errorf("%s: fallBack = %v, want %v", tc.code, got, tc.want)
		}
	}
	if fallBack(&peekError{err: io.EOF}) {
		t.Error("a lost connection falls back")
	}
}
