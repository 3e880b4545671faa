package verify

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestChunkSumsWithoutJIT: a chunk's sums run without JIT, whatever the
// plan's estimate, and digests puts jit back after them.
func TestChunkSumsWithoutJIT(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, note text)`)
	db.Exec(t, `INSERT INTO items SELECT g, 'note ' || g FROM generate_series(1, 2000) g`)
	db.Exec(t, `ANALYZE items`)
	set, err := tableset.Introspect(ctx, db.Pool, tableset.Spec{Name: "items", Tables: []tableset.TableSpec{{Table: "items", KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	q, err := newTableSQL(set.Tables[0], []ring.Range{{Lo: ring.MinToken, Hi: ring.MinToken + 2*(ring.MaxToken/5)}})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := []string{"100"}, []string{"1500"}
	// With the costs: EXPLAIN prints its JIT section only then.
	explain := func(tx pgx.Tx) string { return explainSums(ctx, t, tx, q, lo, hi, "EXPLAIN (ANALYZE) ") }
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// Every statement's estimate passes the thresholds.
	if _, err := tx.Exec(ctx, `SET LOCAL jit = on; SET LOCAL jit_above_cost = 0`); err != nil {
		t.Fatal(err)
	}
	if plan := explain(tx); !strings.Contains(plan, "JIT:") {
		t.Logf("this server compiles nothing with jit on (no llvmjit?): the check below cannot fail here\n%s", plan)
	}
	if _, err := tx.Exec(ctx, chunkSettings); err != nil {
		t.Fatal(err)
	}
	if plan := explain(tx); strings.Contains(plan, "JIT:") {
		t.Errorf("the chunk's sums under chunkSettings were compiled:\n%s", plan)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL jit = on`); err != nil {
		t.Fatal(err)
	}
	if _, err := digests(ctx, tx, q, lo, hi); err != nil {
		t.Fatal(err)
	}
	var jit string
	if err := tx.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil || jit != "on" {
		t.Errorf("jit after digests: %q %v, want on", jit, err)
	}
}

// explainSums returns the plan of q's chunk sums of (lo, hi] under
// explain ("EXPLAIN ", "EXPLAIN (ANALYZE) "), one line per row.
func explainSums(ctx context.Context, t *testing.T, tx pgx.Tx, q *tableSQL, lo, hi []string, explain string) string {
	t.Helper()
	sql, args := q.sums(lo, hi)
	rows, err := tx.Query(ctx, explain+sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
