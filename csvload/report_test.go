package csvload

import (
	"bytes"
	"strings"
	"testing"
)

// What reshard load prints: the total and a line per shard by name, or JSON
// with the error.
func TestResultPrint(t *testing.T) {
	var b bytes.Buffer
	r := Result{Table: "public.users", Version: 3, Rows: map[string]int64{"shard2": 5, "shard1": 7}}
	if err := r.Print(&b, false); err != nil {
		t.Fatal(err)
	}
	if want := "loaded 12 rows of public.users by topology v3:\n  shard1\t7\n  shard2\t5\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	r.Error = "line 3: bad key"
	if err := r.Print(&b, true); err != nil || !strings.Contains(b.String(), `"rows_by_shard": {`) || !strings.Contains(b.String(), `"error": "line 3: bad key"`) {
		t.Errorf("JSON: %v\n%s", err, b.String())
	}
}
