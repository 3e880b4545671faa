package pgsession

import (
	"strings"
	"testing"
)

// Redact hides the password of both DSN forms and HasPassword finds it.
func TestRedactAndHasPassword(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		pw   bool
		want string
	}{
		{"postgres://app:s3cret@db:5432/x?sslmode=disable", true, "postgres://app:xxxxx@db:5432/x?sslmode=disable"},
		{"postgres://app@db/x?password=s3cret", true, "postgres://app@db/x?password=xxxxx"},
		{"host=db user=app password='s3 cret' dbname=x", true, "host=db user=app password=xxxxx dbname=x"},
		{"host=db user=app dbname=x", false, "host=db user=app dbname=x"},
		{"postgres://app@db/x", false, "postgres://app@db/x"},
	} {
		if got := HasPassword(tc.dsn); got != tc.pw {
			t.Errorf("HasPassword(%s) = %v", tc.dsn, got)
		}
		if got := Redact(tc.dsn); got != tc.want || strings.Contains(got, "s3") {
			t.Errorf("Redact(%s) = %s, want %s", tc.dsn, got, tc.want)
		}
	}
}
