package backfill

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestCopyFollowsSchemaChanges: the copy takes the columns both sides have,
// by name: it waits (retryably, copying nothing) while the target lacks
// columns the source has, then copies into a target whose columns are in
// another order, with a type widened there first and a column only it has.
func TestCopyFollowsSchemaChanges(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 400)
	f.src.Exec(t, `ALTER TABLE users ADD COLUMN extra1 int, ADD COLUMN extra2 text; UPDATE users SET extra1 = id, extra2 = 'x' || id`)
	f.dst.Exec(t, `ALTER TABLE orders ADD COLUMN shipped bool NOT NULL DEFAULT false; ALTER TABLE orders ALTER COLUMN total TYPE numeric(20,2)`)
	introspect := func() Options {
		o := f.opts("schema")
		var err error
		if o.Set, err = tableset.Introspect(ctx, f.src.Pool, spec, "source"); err != nil {
			t.Fatal(err)
		}
		if o.TargetSet, err = tableset.Introspect(ctx, f.dst.Pool, spec, "target"); err != nil {
			t.Fatal(err)
		}
		o.Source, o.Target = "shard1", "shard2"
		return o
	}
	_, err := Copy(ctx, f.src.Pool, f.dst.Pool, introspect())
	var wait *tableset.ColumnWaitError
	if !errors.As(err, &wait) || !pgerr.Retryable(err) {
		t.Fatalf("copy while the target lacks users.extra1 and extra2: %v, want a retryable wait", err)
	}
	t.Logf("%v", err)
	for _, want := range []string{"the copy waits for target shard2 to get column extra1, extra2 of public.users", "ADD COLUMN extra1 integer, ADD COLUMN extra2 text"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the wait lacks %q", want)
		}
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM users WHERE `+ring.Predicate("hashint8extended(id, 0)", f.ranges)); n != 0 {
		t.Fatalf("the waiting copy copied %d users", n)
	}
	// The target gets the columns, in the other order.
	f.dst.Exec(t, `ALTER TABLE users ADD COLUMN extra2 text, ADD COLUMN extra1 int`)
	st, err := Copy(ctx, f.src.Pool, f.dst.Pool, introspect())
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	t.Logf("copied %d rows in %d chunks", st.Rows, st.Chunks)
	for table, cols := range map[string]string{
		"users":  "id, email, name, balance, tags, created_at, extra1, extra2",
		"orders": `id, user_id, total, "Note col"`,
		"events": "user_id, k, v",
	} {
		q := `SELECT row(` + cols + `)::text FROM ` + table + ` WHERE ` + ring.Predicate("hashint8extended("+strings.Split(pkOf[table], ",")[0]+", 0)", f.ranges) + ` ORDER BY ` + pkOf[table]
		if table == "orders" {
			q = strings.ReplaceAll(q, "hashint8extended(id, 0)", "hashint8extended(user_id, 0)")
		}
		src, dst := textRows(t, f.src, q), textRows(t, f.dst, q)
		if len(src) == 0 || !slices.Equal(src, dst) {
			t.Errorf("%s: %d source rows, %d target rows, or they differ", table, len(src), len(dst))
		}
	}
	if n := f.dst.QueryInt64(t, `SELECT count(*) FROM orders WHERE shipped`); n != 0 {
		t.Errorf("%d copied orders have shipped set: the target-only column should keep its default", n)
	}

	// A column dropped after the copy read the shapes (source first, as
	// schema apply drops): the chunk fails, the copy sees the shapes moved
	// and says so retryably; the next run, with the new shapes, finishes.
	stale := introspect()
	stale.Move = "schema-drop"
	f.src.Exec(t, `ALTER TABLE users DROP COLUMN extra2`)
	_, err = Copy(ctx, f.src.Pool, f.dst.Pool, stale)
	var moved *SchemaMovedError
	if !errors.As(err, &moved) || !pgerr.Retryable(err) {
		t.Fatalf("copy after a column was dropped under it: %v, want a retryable SchemaMovedError", err)
	}
	t.Logf("%v", err)
	fresh := introspect()
	fresh.Move = "schema-drop"
	if _, err := Copy(ctx, f.src.Pool, f.dst.Pool, fresh); err != nil {
		t.Fatalf("copy with the new shapes (extra2 on the target only): %v", err)
	}
}

func textRows(t *testing.T, db *pgtest.DB, q string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}
