package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

func TestVerifyBadInputIsUsageError(t *testing.T) {
	t.Setenv("RESHARD_SOURCE_DSN", "")
	t.Setenv("RESHARD_TARGET_DSN", "")
	dsn := []string{"--source-dsn", "postgres://u:sekret@127.0.0.1:1/a", "--target-dsn", "postgres://u:sekret@127.0.0.1:1/b"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--table", "users:id", "--range", "0:1"}, "--source-dsn and --target-dsn"},
		{append([]string{"--range", "0:1"}, dsn...), "--table"},
		{append([]string{"--table", "users:id"}, dsn...), "--range"},
		{append([]string{"--table", "users", "--range", "0:1"}, dsn...), "[schema.]table:key"},
		{append([]string{"--table", "users:id", "--range", "5:1"}, dsn...), "lower bound must be below"},
		{append([]string{"--table", "users:id", "--range", "x:1"}, dsn...), "lower bound"},
		{[]string{"--table", "users:id", "--range", "0:1", "--source-dsn", "postgres://u:sekret@[bad", "--target-dsn", "x=y"}, "not a valid"},
		{[]string{"--nope"}, "unknown flag"},
	} {
		out, code := run(t, append([]string{"verify"}, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("reshard verify %s: exit %d, output %q; want exit 2 mentioning %q", strings.Join(tc.args, " "), code, out, tc.want)
		}
		if strings.Contains(out, "sekret") {
			t.Errorf("reshard verify %s printed the password: %q", strings.Join(tc.args, " "), out)
		}
	}
}

func TestVerifyExitCodes(t *testing.T) {
	t.Cleanup(pgtest.StopTemporal) // a fresh Temporal for the tests after this one
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text)`)
		db.Exec(t, `INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 5000) g`)
	}
	args := []string{"verify", "--source-dsn", src.DSN, "--target-dsn", dst.DSN, "--table", "users:id",
		"--range", "-9223372036854775808:0", "--range", "0:9223372036854775807"}
	out, code := run(t, args...)
	if code != 0 || !strings.Contains(out, "OK") {
		t.Fatalf("equal copies: exit %d\n%s", code, out)
	}
	dst.Exec(t, `UPDATE users SET name = 'x' WHERE id = 4242`)
	out, code = run(t, append(args, "--json")...)
	if code != 1 || !strings.Contains(out, "differ") {
		t.Fatalf("one changed row: exit %d\n%s", code, out)
	}
	var rep struct {
		Tables []struct {
			Chunks []struct {
				Keys []struct {
					Key  []string `json:"key"`
					Kind string   `json:"kind"`
				} `json:"keys"`
			} `json:"chunks"`
		} `json:"tables"`
	}
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "reshard:")]), &rep); err != nil {
		t.Fatalf("JSON report: %v\n%s", err, out)
	}
	var found bool
	for _, c := range rep.Tables[0].Chunks {
		for _, k := range c.Keys {
			found = found || (k.Kind == "different" && len(k.Key) == 1 && k.Key[0] == "4242")
		}
	}
	if !found {
		t.Errorf("report does not name id 4242 as different:\n%s", out)
	}
}
