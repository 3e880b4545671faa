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

// reshard load puts every row of a CSV file on the shard that owns it (check
// placement is then clean), and refuses a file with a bad key before loading
// anything.
func TestLoad(t *testing.T) {
	control, a, b := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 2)
	for _, db := range []*pgtest.DB{a, b} {
		db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text NOT NULL, note text)`)
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
	if out, code := run(t, "init", "--config", config, "--shards", "shard1,shard2", "--table", "users:id"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	var csv strings.Builder
	csv.WriteString("id,name,note\n")
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&csv, "%d,\"user, %d\",\n", i, i) // a quoted comma; an empty note is NULL
	}
	file := filepath.Join(dir, "users.csv")
	if err := os.WriteFile(file, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "load", "--config", config, "--table", "users", "--file", file, "--batch-rows", "100")
	if code != 0 || !strings.Contains(out, "loaded 1000 rows of public.users") {
		t.Fatalf("load: exit %d\n%s", code, out)
	}
	na, nb := a.QueryInt64(t, `SELECT count(*) FROM users`), b.QueryInt64(t, `SELECT count(*) FROM users`)
	if na+nb != 1000 || na == 0 || nb == 0 {
		t.Fatalf("rows per shard %d + %d, want 1000 spread over both", na, nb)
	}
	if n := a.QueryInt64(t, `SELECT count(*) FROM users WHERE id = 7 AND name = 'user, 7' AND note IS NULL`) +
		b.QueryInt64(t, `SELECT count(*) FROM users WHERE id = 7 AND name = 'user, 7' AND note IS NULL`); n != 1 {
		t.Fatalf("user 7 loaded %d times as written", n)
	}
	if out, code := run(t, "check", "placement", "--config", config); code != 0 {
		t.Fatalf("check placement after load: exit %d\n%s", code, out)
	}
	// A bad key on the last line: refused, nothing loaded.
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("id,name\n2001,x\n2002,y\nnot-a-number,z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = run(t, "load", "--config", config, "--table", "users", "--file", bad)
	if code != 2 || !strings.Contains(out, "line 4") || !strings.Contains(out, "not-a-number") {
		t.Fatalf("load of a bad key: exit %d\n%s", code, out)
	}
	if n := a.QueryInt64(t, `SELECT count(*) FROM users WHERE id > 2000`) + b.QueryInt64(t, `SELECT count(*) FROM users WHERE id > 2000`); n != 0 {
		t.Fatalf("%d rows of the refused file were loaded", n)
	}
	// An unknown table or key column: refused naming it.
	if out, code := run(t, "load", "--config", config, "--table", "orders", "--file", file); code != 2 || !strings.Contains(out, "not in keyspace") {
		t.Fatalf("load into an unregistered table: exit %d\n%s", code, out)
	}
}
