package tableset

import (
	"context"
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// A nullable key, a key under a nondeterministic collation and a partitioned
// table are read as they are but refused by Shardable, each with the reason
// and the fix; a plain table with a NOT NULL key under a deterministic
// collation passes.
func TestShardableRefuses(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
		CREATE TABLE ok (id text COLLATE "POSIX" PRIMARY KEY, note text);
		CREATE TABLE nullable (id bigserial PRIMARY KEY, user_id bigint);
		CREATE TABLE ci_key (k text COLLATE ci PRIMARY KEY);
		CREATE TABLE parted (id bigint NOT NULL, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100)`)
	cases := []struct {
		table, key, check, want string
	}{
		{"nullable", "user_id", CheckKeyNotNull, `ALTER TABLE "public"."nullable" ALTER COLUMN "user_id" SET NOT NULL`},
		{"ci_key", "k", CheckKeyCollation, "nondeterministic collation public.ci"},
		{"parted", "id", CheckPartitioned, "is partitioned"},
	}
	for _, c := range cases {
		set, err := Introspect(context.Background(), db.Pool, Spec{Name: "s", Tables: []TableSpec{{Table: c.table, KeyColumn: c.key}}}, "shard1")
		if err != nil {
			t.Fatalf("%s: %v", c.table, err)
		}
		ps := Shardable(set.Tables[0], "shard1")
		if len(ps) != 1 || ps[0].Check != c.check || ps[0].Table != "public."+c.table || ps[0].Fix == "" || !strings.Contains(ps[0].Error(), c.want) {
			t.Errorf("%s: problems %v, want one %s mentioning %q", c.table, ps, c.check, c.want)
		}
		if err := ShardableSet(set, "shard1"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ShardableSet %v", c.table, err)
		}
	}
	set, err := Introspect(context.Background(), db.Pool, Spec{Name: "s", Tables: []TableSpec{{Table: "ok", KeyColumn: "id"}}}, "shard1")
	if err != nil {
		t.Fatal(err)
	}
	if ps := Shardable(set.Tables[0], "shard1"); len(ps) != 0 {
		t.Fatalf("a NOT NULL key under a deterministic collation refused: %v", ps)
	}
}
