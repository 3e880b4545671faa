package tableset

import (
	"context"
	"strings"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// MissingTypes names each user-defined type the target lacks (an enum with
// its labels, a domain, an extension's type, an array's element type) with
// what to create, and nothing once the target has them.
func TestMissingTypes(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, `CREATE EXTENSION citext;
		CREATE TYPE mood AS ENUM ('sad', 'ok');
		CREATE DOMAIN posint AS int CHECK (VALUE > 0);
		CREATE TABLE users (id bigint PRIMARY KEY, email citext, m mood, ms mood[], n posint, t text)`)
	set, err := Introspect(context.Background(), src.Pool, Spec{Name: "s", Tables: []TableSpec{{Table: "users", KeyColumn: "id"}}}, "shard1")
	if err != nil {
		t.Fatal(err)
	}
	err = MissingTypes(context.Background(), src.Pool, dst.Pool, set.Tables, "shard1", "shard2")
	for _, want := range []string{
		"column public.users.email is of type public.citext, of the extension citext, which shard2 lacks: install it on shard2: CREATE EXTENSION citext",
		"column public.users.m is of the enum type public.mood, which shard2 lacks: create it on shard2 as on shard1: CREATE TYPE public.mood AS ENUM ('sad', 'ok')",
		"column public.users.n is of the domain public.posint (over integer)",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("MissingTypes: %v\nwant it to say %q", err, want)
		}
	}
	if err != nil && strings.Count(err.Error(), "public.mood") != 2 { // once, for m (ms uses the same type)
		t.Errorf("the enum named more than once: %v", err)
	}
	dst.Exec(t, `CREATE EXTENSION citext; CREATE TYPE mood AS ENUM ('sad', 'ok'); CREATE DOMAIN posint AS int`)
	if err := MissingTypes(context.Background(), src.Pool, dst.Pool, set.Tables, "shard1", "shard2"); err != nil {
		t.Fatalf("with the types created: %v", err)
	}
}
