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

// TestChunkSumsWithoutJIT: a chunk's sums are not JIT-compiled, whatever
// the plan's estimate or the caller's pool, in verify's own sessions (dial)
// and in a transaction it is handed (verifySessionSQL, the capacity probe's
// target).
func TestChunkSumsWithoutJIT(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, note text)`)
	db.Exec(t, `INSERT INTO items SELECT g, 'note ' || g FROM generate_series(1, 2000) g`)
	db.Exec(t, `ANALYZE items`)
	// A pool that compiles every statement when it can.
	pool := db.PoolWith(t, map[string]string{"jit": "on", "jit_above_cost": "0"})
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

	// The pool itself compiles the chunk: the checks below can fail.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if plan := explain(tx); !strings.Contains(plan, "JIT:") {
		t.Fatalf("the caller's pool compiles nothing (no llvmjit?), so this test proves nothing:\n%s", plan)
	}
	if _, err := tx.Exec(ctx, verifySessionSQL); err != nil {
		t.Fatal(err)
	}
	if plan := explain(tx); strings.Contains(plan, "JIT:") {
		t.Errorf("a chunk's sums after verifySessionSQL were compiled:\n%s", plan)
	}
	r, err := begin(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if plan := explain(r.tx); strings.Contains(plan, "JIT:") {
		t.Errorf("verify's session compiled a chunk's sums:\n%s", plan)
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
