package ledger

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestFailedByCode(t *testing.T) {
	var s Stats
	if got := s.FailedByCode(); got != "" {
		t.Fatalf("no failures: got %q", got)
	}
	admin := &pgconn.PgError{Code: "57P01"}
	s.countFailure(fmt.Errorf("write key 7: %w", admin))
	s.countFailure(admin)
	s.countFailure(errors.New("dial tcp: connection refused"))
	s.countFailure(&pgconn.PgError{Code: "RSF01"})
	if got, want := s.FailedByCode(), "57P01=2 none=1 RSF01=1"; got != want {
		t.Fatalf("FailedByCode() = %q, want %q", got, want)
	}
	if got := s.FailureSamples(); len(got) != 3 || got[0] != "57P01: write key 7: "+admin.Error() || got[1] != "none: dial tcp: connection refused" {
		t.Fatalf("FailureSamples() = %q", got)
	}
}
