package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func pg(code string) error { return fmt.Errorf("exec: %w", &pgconn.PgError{Code: code}) }

func TestPredicates(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		err                             error
		retryable, lost, fatal, ddlRace bool
	}{
		{"nil", nil, false, false, false, false},
		{"connection failure", pg("08006"), true, true, false, false},
		{"out of memory", pg("53200"), true, false, false, false},
		{"serialization failure", pg("40001"), true, false, false, false},
		{"deadlock", pg("40P01"), true, false, false, false},
		{"admin shutdown", pg("57P01"), true, true, false, false},
		{"slot in use", pg("55006"), true, false, false, false},
		{"temp_file_limit", pg("53400"), true, false, false, false},
		{"starting up", pg("57P03"), true, true, false, false},
		{"database dropped", pg("57P04"), false, false, false, false},
		{"lock timeout", pg("55P03"), false, false, false, false},
		{"bad data", pg("22P02"), false, false, true, false},
		{"unique violation", pg("23505"), false, false, true, false},
		{"catalog unique violation", fmt.Errorf("x: %w", &pgconn.PgError{Code: "23505", ConstraintName: "pg_namespace_nspname_index"}), false, false, true, true},
		{"duplicate table", pg("42P07"), false, false, true, true},
		{"undefined table", pg("42P01"), false, false, true, false},
		{"EOF", fmt.Errorf("read: %w", io.EOF), true, true, false, false},
		{"closed", errors.New("conn closed"), true, true, false, false},
		{"cancelled", fmt.Errorf("copy: %w", context.Canceled), false, false, false, false},
		{"deadline", context.DeadlineExceeded, false, true, false, false}, // a timeout of the connection, but the caller stopped
		{"plain", errors.New("no such shard"), false, false, false, false},
	} {
		if got := Retryable(tc.err); got != tc.retryable {
			t.Errorf("%s: Retryable = %v", tc.name, got)
		}
		if got := ConnectionLost(tc.err); got != tc.lost {
			t.Errorf("%s: ConnectionLost = %v", tc.name, got)
		}
		if got := FatalInput(tc.err); got != tc.fatal {
			t.Errorf("%s: FatalInput = %v", tc.name, got)
		}
		if got := DDLRace(tc.err); got != tc.ddlRace {
			t.Errorf("%s: DDLRace = %v", tc.name, got)
		}
	}
}

type answers struct {
	retry bool
	err   error
}

func (e *answers) Error() string   { return "answers" }
func (e *answers) Unwrap() error   { return e.err }
func (e *answers) Retryable() bool { return e.retry }

// An error that says whether to retry is asked first, whatever it wraps:
// the domain packages' types answer for themselves (cdc.ConnError,
// cdc.SchemaChangeError, ...), so classify asks Retryable alone.
func TestRetryableAsksTheError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"says yes over a deadline", fmt.Errorf("op: %w", &answers{true, context.DeadlineExceeded}), true},
		{"says no over a lost connection", &answers{false, io.EOF}, false},
		{"says yes, cancelled", &answers{true, context.Canceled}, false},
		{"collision", &CollisionError{Table: "t", Key: "id=1"}, false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("%s: Retryable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// RowSecurity is a refusal by a row-level security policy, not any 42501.
func TestRowSecurity(t *testing.T) {
	rls := fmt.Errorf("copy chunk: %w", &pgconn.PgError{Code: "42501", Message: `query would be affected by row-level security policy for table "users"`})
	denied := fmt.Errorf("copy chunk: %w", &pgconn.PgError{Code: "42501", Message: "permission denied for table users"})
	if !RowSecurity(rls) || RowSecurity(denied) || RowSecurity(nil) || RowSecurity(errors.New("row-level security")) {
		t.Fatalf("RowSecurity: policy %v, permission %v", RowSecurity(rls), RowSecurity(denied))
	}
	if !FatalInput(rls) || Retryable(rls) {
		t.Fatal("a row-security refusal must stop, not retry")
	}
}

func TestUnique(t *testing.T) {
	v := &pgconn.PgError{Code: "23505", SchemaName: "public", TableName: "users", ConstraintName: "users_email_key", Detail: "Key (email)=(a@x) already exists."}
	err := Unique(fmt.Errorf("upsert: %w", v))
	var ue *UniqueError
	if !errors.As(err, &ue) || !Collision(err) || Retryable(err) || !FatalInput(err) {
		t.Fatalf("Unique = %#v: want a non-retryable collision that is still a 23505", err)
	}
	if want := `unique constraint "users_email_key" of public.users: Key (email)=(a@x) already exists on the target:`; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message %q, want it to start %q", err, want)
	}
	if Unique(err) != err {
		t.Fatal("Unique of a UniqueError wraps it again")
	}
	for _, other := range []error{pg("23503"), &pgconn.PgError{Code: "23505", ConstraintName: "pg_class_relname_nsp_index"}, errors.New("plain")} {
		if got := Unique(other); got != other {
			t.Fatalf("Unique(%v) = %v, want it unchanged", other, got)
		}
	}
}
