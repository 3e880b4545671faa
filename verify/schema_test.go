package verify

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestVerifyComparesOnlyWhenColumnsAgree: while a column is on one side
// only, or typed differently, verify compares nothing and says which shard
// lacks what and the command; once both sides have it, the new column is
// compared (a value that differs there is found).
func TestVerifyComparesOnlyWhenColumnsAgree(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, usersSrc)
	dst.Exec(t, usersDst)
	src.Exec(t, usersFill, 1, 2000)
	dst.Exec(t, usersFill, 1, 2000)
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: 0}}
	run := func() (*Report, error) {
		return Run(ctx, src.Pool, dst.Pool, Options{Set: introspect(t, src, usersSpec), TargetSet: introspect(t, dst, usersSpec),
			Source: "shard1", Target: "shard2", Ranges: ranges, ChunkRows: 500})
	}
	if rep, err := run(); err != nil || !rep.OK() {
		t.Fatalf("before any change: %v %+v", err, rep)
	}
	for _, c := range []struct {
		on        *pgtest.DB
		ddl, want string
	}{
		{src, "ALTER TABLE users ADD COLUMN note text", "verify waits for target shard2 to get column note of public.users, which source shard1 has"},
		{dst, "ALTER TABLE users ADD COLUMN note text, ADD COLUMN extra int", "verify waits for source shard1 to get column extra of public.users, which target shard2 has"},
		{src, "ALTER TABLE users ADD COLUMN extra bigint", "verify waits for source shard1 to agree with target shard2 on the type of column extra of public.users: run reshard schema apply --keyspace users 'ALTER TABLE public.users ALTER COLUMN extra TYPE integer'"},
	} {
		c.on.Exec(t, c.ddl)
		_, err := run()
		var wait *tableset.ColumnWaitError
		if !errors.As(err, &wait) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("after %s: %v\nwant a wait saying %q", c.ddl, err, c.want)
		}
	}
	src.Exec(t, "ALTER TABLE users ALTER COLUMN extra TYPE int")
	src.Exec(t, "UPDATE users SET note = 'n' || id")
	dst.Exec(t, "UPDATE users SET note = 'n' || id")
	if rep, err := run(); err != nil || !rep.OK() || rep.Rows == 0 {
		t.Fatalf("once the shards agree: %v %+v", err, rep)
	}
	k := inRange(t, src, ranges, 1, 2000, true)
	dst.Exec(t, "UPDATE users SET note = 'other' WHERE id = $1", k)
	rep, err := run()
	if err != nil || rep.OK() || rep.Mismatches() != 1 {
		t.Fatalf("a difference in the new column: %v, %d mismatches, want 1", err, rep.Mismatches())
	}
}
