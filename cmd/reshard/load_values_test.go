package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestLoadParsesValuesAlikeOnEveryShard: two shards whose defaults differ
// in every setting that shapes a value's text (TimeZone Asia/Kolkata and
// America/St_Johns, xmloption document, array_nulls off, ...) take a CSV
// file's values as the same values: a timestamptz without an offset in
// UTC, an xml fragment, an array's NULL. On 6e755b7 each shard parsed them
// under its own defaults (the xml fragment refused, the timestamps 9 hours
// apart).
func TestLoadParsesValuesAlikeOnEveryShard(t *testing.T) {
	control, a, b := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	for i, db := range []*pgtest.DB{a, b} {
		db.Exec(t, `CREATE TABLE ev (id bigint PRIMARY KEY, d date, ts timestamptz, x xml, a text[])`)
		db.SetDefaults(t, pgtest.OddDefaults[i])
	}
	wc := devenv.WorkerConfig{Control: control.DSN, Shards: map[string]string{"shard1": a.DSN, "shard2": b.DSN},
		Temporal: devenv.TemporalConfig{Address: "127.0.0.1:1", Namespace: devenv.Namespace}}
	y, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "reshard.yaml")
	if err := os.WriteFile(config, y, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "init", "--config", config, "--shards", "shard1,shard2", "--table", "ev:id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	var csv strings.Builder
	csv.WriteString("id,d,ts,x,a\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&csv, "%d,2024-03-04,2024-03-04 10:00:00,<a>x</a>text,\"{NULL,x}\"\n", i)
	}
	file := filepath.Join(dir, "ev.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "load", "--config", config, "--table", "ev", "--file", file); code != 0 {
		t.Fatalf("load: exit %d\n%s", code, out)
	}
	const want = `(2024-03-04,"2024-03-04 10:00:00+00",<a>x</a>text,"{NULL,x}")`
	var total int
	for _, db := range []*pgtest.DB{a, b} {
		rows := db.RowsAsText(t, "ev", "id")
		total += len(rows)
		for _, r := range rows {
			_, row, _ := strings.Cut(r, "|")
			if _, rest, _ := strings.Cut(row, ","); "("+rest != want {
				t.Errorf("%s: loaded %s, want (id,%s", db.Name, row, want[1:])
			}
		}
	}
	if total != 40 {
		t.Fatalf("%d rows loaded, want 40", total)
	}
}
