package tableset

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestIntrospect(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, n int GENERATED ALWAYS AS (length(email)) STORED);
		CREATE TABLE orders (user_id bigint NOT NULL, id bigserial, total numeric(10,2), PRIMARY KEY (id));
		ALTER TABLE orders REPLICA IDENTITY FULL`)
	set, err := Introspect(context.Background(), db.Pool, Spec{Name: "app", Tables: []TableSpec{
		{Table: "users", KeyColumn: "id"}, {Table: "orders", KeyColumn: "user_id"},
	}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	if set.KeyType != ring.KeyInt {
		t.Fatalf("key type %s", set.KeyType)
	}
	u, o := set.Tables[0], set.Tables[1]
	if len(u.WritableColumns()) != 2 || !u.KeyInPK() || !u.KeyInIdentity() {
		t.Fatalf("users: %+v", u)
	}
	if o.KeyInPK() || !o.KeyInIdentity() || strings.Join(o.PK, ",") != "id" {
		t.Fatalf("orders: %+v", o)
	}
	if got := o.TokenSQL("o"); got != `hashint8extended("o"."user_id", 0)` {
		t.Fatalf("TokenSQL %s", got)
	}
}

func TestIntrospectErrorsNameTheFix(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE nopk (id bigint); CREATE TABLE k (id bigint PRIMARY KEY, f float8); CREATE TABLE t2 (id text PRIMARY KEY)`)
	ctx := context.Background()
	cases := []struct {
		spec Spec
		want string
	}{
		{Spec{Name: "s", Tables: []TableSpec{{Table: "missing", KeyColumn: "id"}}}, "does not exist"},
		{Spec{Name: "s", Tables: []TableSpec{{Table: "nopk", KeyColumn: "id"}}}, "ADD PRIMARY KEY"},
		{Spec{Name: "s", Tables: []TableSpec{{Table: "k", KeyColumn: "nope"}}}, `no column "nope"`},
		{Spec{Name: "s", Tables: []TableSpec{{Table: "k", KeyColumn: "f"}}}, "cannot hash"},
		{Spec{Name: "s", Tables: []TableSpec{{Table: "k", KeyColumn: "id"}, {Table: "t2", KeyColumn: "id"}}}, "one key type"},
		{Spec{Name: "s"}, "lists no tables"},
	}
	for _, c := range cases {
		_, err := Introspect(ctx, db.Pool, c.spec, "source shard1")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("spec %+v: err %v, want it to mention %q", c.spec, err, c.want)
		}
	}
}
