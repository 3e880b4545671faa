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

// TestChunkSumsByBitmapScan: digests reads its chunk with index scans off
// (a bitmap scan of the key interval, cheaper per row) and puts the setting
// back for the statements after it in the transaction (nth and rows want
// the index's key order); the chunk's digest is the one an index scan
// computes.
func TestChunkSumsByBitmapScan(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE items (id bigint PRIMARY KEY, amount numeric(12,2), score float8, attrs jsonb, note text)`)
	db.Exec(t, `INSERT INTO items SELECT g, g / 100.0, g / 7.0, jsonb_build_object('g', g, 'x', g / 2.0), 'note ' || g FROM generate_series(1, 5000) g`)
	db.Exec(t, `ANALYZE items`)
	set, err := tableset.Introspect(ctx, db.Pool, tableset.Spec{Name: "items", Tables: []tableset.TableSpec{{Table: "items", KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	q, err := newTableSQL(set.Tables[0], []ring.Range{{Lo: ring.MinToken, Hi: ring.MinToken + 2*(ring.MaxToken/5)}})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := []string{"500"}, []string{"3500"}
	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	got, err := digests(ctx, tx, q, lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	var setting string
	if err := tx.QueryRow(ctx, `SHOW enable_indexscan`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "on" {
		t.Errorf("enable_indexscan after digests: %s, want on", setting)
	}
	// The same chunk by an index scan.
	if _, err := tx.Exec(ctx, `SET LOCAL enable_bitmapscan = off`); err != nil {
		t.Fatal(err)
	}
	sql, args := q.sums(lo, hi)
	var plan string
	if err := tx.QueryRow(ctx, "EXPLAIN (COSTS OFF) "+sql, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var want digest
	var r int
	var s string
	if err := tx.QueryRow(ctx, sql, args...).Scan(&r, &want.n, &want.x, &s); err != nil {
		t.Fatal(err)
	}
	want.s.SetString(s, 10)
	if want.n < 300 || !got[0].equal(&want) {
		t.Errorf("digest %s, want %s as an index scan computes it (%s)", got[0], &want, plan)
	}
}

// TestChunkSumsWithoutJIT: a chunk's sums run without JIT, whatever the
// plan's estimate (the bitmap scan's passes jit_above_cost on a large
// table), and digests puts jit back after them.
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
	explain := func(tx pgx.Tx) string {
		t.Helper()
		sql, args := q.sums(lo, hi)
		// With the costs: EXPLAIN prints its JIT section only then.
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE) "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
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
