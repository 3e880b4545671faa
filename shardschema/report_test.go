package shardschema

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reshard/reshard/tableset"
)

// What schema sync and schema apply print, and where apply's statements
// come from, without the CLI.
func TestReportsAndScript(t *testing.T) {
	var b bytes.Buffer
	r := SyncReport{Keyspace: "default", From: "shard1", Target: "shard5", DryRun: true, Tables: []Table{
		{Table: "public.users", Action: "create", TokenIndex: "reshard_token_users"},
		{Table: "public.orders", Action: "in-sync", TokenIndex: "reshard_token_orders"}}}
	if err := r.Print(&b, false); err != nil {
		t.Fatal(err)
	}
	want := "would create public.users on shard5 (from shard1), token index reshard_token_users\n" +
		"public.orders on shard5 matches shard1; token index reshard_token_orders\n"
	if b.String() != want {
		t.Errorf("sync:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := r.Print(&b, true); err != nil || !strings.Contains(b.String(), `"dry_run": true`) {
		t.Errorf("sync JSON: %v\n%s", err, b.String())
	}
	b.Reset()
	res := []tableset.DDLResult{{Shard: "s1", What: "add column nickname", Outcome: "applied", Attempts: 3},
		{Shard: "s2", What: "add column nickname", Outcome: "failed", Reason: "lock timeout"}}
	if err := PrintApply(&b, "default", res, false); err != nil {
		t.Fatal(err)
	}
	want = "s1: add column nickname: applied (3 attempts)\ns2: add column nickname: failed: lock timeout\n"
	if b.String() != want {
		t.Errorf("apply:\n%s\nwant\n%s", b.String(), want)
	}
	file := filepath.Join(t.TempDir(), "0042.sql")
	if err := os.WriteFile(file, []byte("ALTER TABLE t ADD c int"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args       []string
		file, want string
		fails      bool
	}{
		{[]string{"ALTER TABLE a"}, "", "ALTER TABLE a", false},
		{nil, file, "ALTER TABLE t ADD c int", false},
		{nil, "-", "from stdin", false},
		{[]string{"x"}, file, "not both", true},
		{nil, "", "give the statements", true},
		{nil, file + ".missing", "read --file", true},
	} {
		got, err := Script(tc.args, tc.file, strings.NewReader("from stdin"))
		if tc.fails && (err == nil || !strings.Contains(err.Error(), tc.want)) || !tc.fails && (err != nil || got != tc.want) {
			t.Errorf("%v %q: got %q, %v; want %q", tc.args, tc.file, got, err, tc.want)
		}
	}
}
