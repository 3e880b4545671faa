package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// rowsOf renders every row of query on dbs, NULL apart from any string, sorted.
func rowsOf(t *testing.T, query string, dbs ...*pgtest.DB) []string {
	t.Helper()
	var out []string
	for _, db := range dbs {
		rows, err := db.Pool.Query(context.Background(), query)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			for _, v := range vals {
				if v == nil {
					b.WriteString("NULL|")
				} else {
					fmt.Fprintf(&b, "%q|", fmt.Sprint(v))
				}
			}
			out = append(out, b.String())
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(out)
	return out
}

// reshard load stores what PostgreSQL's own COPY (FORMAT csv, HEADER) of
// the same file stores: "" an empty string (also as a text key), an
// unquoted empty field NULL, CR LF inside a quoted field kept, a UTF-8 BOM
// before the header dropped, CR LF line endings.
func TestLoadStoresWhatCopyStores(t *testing.T) {
	const ddl = `CREATE TABLE items (k text PRIMARY KEY, a text, b text, n smallint)`
	c := newEmptyCluster(t, ddl)
	ref := pgtest.NewDB(t, 0)
	ref.Exec(t, ddl)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2", "--table", "items:k"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	dir := t.TempDir()
	files := map[string]string{
		"values.csv": "k,a,b,n\n" +
			"\"\",x,,1\n" + // an empty text key; b NULL
			"k1,\"\",,2\n" + // a "" is an empty string, b NULL
			"k2,\"line1\r\nline2\",\"q\"\"r\",\n" + // CR LF kept; n NULL
			"k3,  sp ,\"\",3\n" +
			"k4,a\"b,c\"d,x,\"4\"\n", // a quote opens mid-field: a is "ab,cd"
		"bom.csv": "\xEF\xBB\xBFk,a,n\r\nb1,\"x\r\n\",5\r\nb2,,\r\nb3,\"\",6\r\n",
	}
	for name, body := range files {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, code := c.run(t, "load", "--table", "items", "--file", file, "--batch-rows", "2"); code != 0 {
			t.Fatalf("load %s: exit %d\n%s", name, code, out)
		}
		cols := "k, a, b, n"
		if name == "bom.csv" {
			cols = "k, a, n"
		}
		if _, err := ref.Conn(t).PgConn().CopyFrom(context.Background(), bytes.NewReader([]byte(body)), "COPY items ("+cols+") FROM STDIN WITH (FORMAT csv, HEADER)"); err != nil {
			t.Fatalf("COPY %s into the reference: %v", name, err)
		}
	}
	q := `SELECT k, a, b, n, a IS NULL, b IS NULL FROM items`
	got, want := rowsOf(t, q, c.shards["shard1"], c.shards["shard2"]), rowsOf(t, q, ref)
	if !slices.Equal(got, want) {
		t.Fatalf("the shards hold\n  %s\nCOPY stores\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if len(want) != 8 {
		t.Fatalf("%d rows, want 8", len(want))
	}
}
