package rollback_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/testkit/pgtest"
)

// oddShards gives shard a and shard b database defaults unlike
// PostgreSQL's and unlike each other's in every setting that shapes a
// value's text form (pgtest.OddDefaults).
func oddShards(t testing.TB, e *movetest.Env) {
	e.DBs["a"].SetDefaults(t, pgtest.OddDefaults[0])
	e.DBs["b"].SetDefaults(t, pgtest.OddDefaults[1])
}

// insertValues writes pgtest.ValueRows under keys, one transaction for all.
func insertValues(t *testing.T, db *pgtest.DB, keys []int64) {
	t.Helper()
	var b strings.Builder
	b.WriteString("BEGIN;")
	for i, k := range keys {
		fmt.Fprintf(&b, "INSERT INTO vals VALUES (%d, %s);", k, pgtest.ValueRows[i%len(pgtest.ValueRows)])
	}
	db.Exec(t, b.String()+"COMMIT")
}

// shiftValues gives each row of keys the values of the next row of vals.
func shiftValues(t *testing.T, db *pgtest.DB, keys []int64) {
	t.Helper()
	db.Exec(t, `UPDATE vals v SET (`+pgtest.ValuesColumns+`) = (SELECT `+pgtest.ValuesColumns+` FROM vals w
		WHERE w.k = (SELECT min(x.k) FROM vals x WHERE x.k > v.k)) WHERE v.k = ANY($1)`, keys)
}

// TestValuesCrossAMoveAndItsRollback: two shards whose defaults differ in
// every setting that shapes a value's text form. Rows of dates, timestamps,
// intervals, float edges (0.30000000000000004, 1.7976931348623157e308, -0,
// NaN, Infinity), bytea, money, xml and arrays go through the copy, the
// forward catch-up, GRACE's reverse stream and a rollback, and each time
// arrive with every value's text, read under pinned settings, as it left.
func TestValuesCrossAMoveAndItsRollback(t *testing.T) {
	e := movetest.New(t, "values", 400, movetest.Table(pgtest.ValuesTable("vals", "k"), "vals", "k"), oddShards)
	n := len(pgtest.ValueRows)
	if len(e.MovingKeys) < 3*n {
		t.Fatalf("%d moving keys, want %d", len(e.MovingKeys), 3*n)
	}
	keys := e.MovingKeys
	a, b := e.DBs["a"], e.DBs["b"]
	insertValues(t, a, keys[:n]) // copied
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	insertValues(t, a, keys[n:2*n]) // caught up
	shiftValues(t, a, keys[:3])
	movetest.Drain(t, a, e.Fwd)
	want := a.RowsAsText(t, "vals", "k")
	if len(want) != 2*n {
		t.Fatalf("%d rows of vals on a, want %d", len(want), 2*n)
	}
	pgtest.DiffRows(t, "copy and catch-up, b", want, b.RowsAsText(t, "vals", "k"))

	if _, err := e.Cutover(t, 2*time.Second); err != nil {
		t.Fatalf("cutover: %v", err)
	}
	e.StopForward(t)
	e.StartReverse(t)
	insertValues(t, b, keys[2*n:3*n]) // streamed back in GRACE
	shiftValues(t, b, keys[n:n+3])
	movetest.Drain(t, b, e.Rev)
	want = b.RowsAsText(t, "vals", "k")
	pgtest.DiffRows(t, "GRACE's reverse stream, a", want, a.RowsAsText(t, "vals", "k"))

	e.StopReverse(t)
	shiftValues(t, b, keys[2*n:2*n+3]) // for the rollback's own reverse stream
	want = b.RowsAsText(t, "vals", "k")
	if _, err := rollback.DuringGrace(movetest.Ctx(t), e.Move, e.ReverseOptions(t), options(e)); err != nil {
		t.Fatal(err)
	}
	pgtest.DiffRows(t, "rollback, a", want, a.RowsAsText(t, "vals", "k"))
	if got := b.RowsAsText(t, "vals", "k"); len(got) != 0 {
		t.Errorf("%d rows of vals left on b after the rollback", len(got))
	}
}
