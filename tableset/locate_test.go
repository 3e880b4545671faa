package tableset

import (
	"context"
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// Locate names a table no server has with the closest ones the servers or
// the registry have, and a table some servers lack with those servers.
func TestLocate(t *testing.T) {
	a, b := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	a.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY); CREATE TABLE orders (id bigint PRIMARY KEY)`)
	b.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY); CREATE SCHEMA billing; CREATE TABLE billing.invoices (id bigint PRIMARY KEY)`)
	servers := map[string]Querier{"shard1": a.Pool, "shard2": b.Pool}
	ctx := context.Background()
	if err := Locate(ctx, servers, Spec{Tables: []TableSpec{{Table: "users", KeyColumn: "id"}}}, nil); err != nil {
		t.Fatalf("every server has users: %v", err)
	}
	for _, c := range []struct {
		table      TableSpec
		registered []string
		want       string
	}{
		{TableSpec{Table: "userz"}, nil, "table public.userz exists on no shard (shard1, shard2): did you mean public.users? If not, create it on every shard first"},
		{TableSpec{Table: "invoices"}, nil, "did you mean billing.invoices?"},
		{TableSpec{Table: "acounts"}, []string{"public.accounts"}, "did you mean public.accounts?"},
		{TableSpec{Table: "orders"}, nil, "table public.orders is missing on shard2 (the other shards have it)"},
	} {
		err := Locate(ctx, servers, Spec{Tables: []TableSpec{c.table}}, c.registered)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.table.Table, err, c.want)
		}
	}
	if err := Locate(ctx, servers, Spec{Tables: []TableSpec{{Table: "zzzzzz"}}}, nil); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("a name like no table: %v, want no suggestion", err)
	}
}
