package verify

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// verify's direct-mode request, its verdict and the repair lines, without
// the CLI.
func TestParseDirectAndVerdict(t *testing.T) {
	for _, tc := range []struct {
		src, dst       string
		tables, ranges []string
		want           string
	}{
		{"", "d", []string{"t:k"}, []string{"1:2"}, "--source-dsn and --target-dsn"},
		{"s", "d", nil, []string{"1:2"}, "--table"},
		{"s", "d", []string{"t:k"}, nil, "--range"},
		{"s", "d", []string{"t"}, []string{"1:2"}, `--table "t"`},
		{"s", "d", []string{"t:k"}, []string{"2:1"}, "--range"},
	} {
		if _, _, err := ParseDirect(tc.src, tc.dst, tc.tables, tc.ranges); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error naming %s", tc, err, tc.want)
		}
	}
	spec, rs, err := ParseDirect("s", "d", []string{"app.users:id", "orders:user_id"}, []string{"1:2", "(5,9]"})
	if err != nil || spec.Name != "users" || spec.Tables[0].Schema != "app" || spec.Tables[1].KeyColumn != "user_id" || len(rs) != 2 || rs[1].Lo != 5 {
		t.Fatalf("got %+v %v %v", spec, rs, err)
	}
	if err := (&Report{}).Verdict(); err != nil {
		t.Errorf("an empty report: %v", err)
	}
	bad := &Report{Tables: []TableReport{{Mismatches: 3}}}
	if err := bad.Verdict(); !errors.Is(err, ErrMismatch) || err.Error() != "source and target differ: 3 rows" {
		t.Errorf("3 rows differ: %v", err)
	}
	var b bytes.Buffer
	if err := PrintRepairs(&b, []RepairedMove{{Move: "m1", Source: "a", Target: "b", Report: &RepairReport{Chunks: 4, Repaired: 1, RowsCopied: 25, RowsDeleted: 8, Duration: 1500 * time.Microsecond,
		Tables: []TableRepair{{Table: "public.users", Chunks: 4, Repaired: 1, RowsCopied: 25, RowsDeleted: 8}}}}}); err != nil {
		t.Fatal(err)
	}
	// tabwriter counts bytes: "→" is three.
	want := "MOVE  SOURCE → TARGET  TABLE         CHUNKS  REPAIRED  ROWS COPIED  ROWS DELETED\n" +
		"m1    a → b            public.users  4       1         25           8\n" +
		"move m1: 1 of 4 chunks differed and were rewritten, 25 rows copied, 8 deleted, in 2ms\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
