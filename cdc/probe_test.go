package cdc

import (
	"context"
	"math"
	"testing"

	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestProbeApplyRunsTheAppliersStatements: the probe of the applier really
// writes its batch, with the applier's statements, in the caller's
// transaction, only to rows in the ranges, in the kinds asked for, and
// leaves nothing once that transaction is rolled back. The rows it wrote
// carry the transaction's xid: a probe that timed nothing applied would
// show none.
func TestProbeApplyRunsTheAppliersStatements(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, balance bigint NOT NULL DEFAULT 0, payload text)`)
	inside := insideUsers(3000, 1)
	db.Exec(t, `INSERT INTO users (id, email, payload) SELECT id, 'u'||id||'@x', CASE WHEN id % 7 = 0 THEN NULL ELSE repeat('p', 50) END FROM unnest($1::bigint[]) id`, inside)
	var outside []int64
	for id := int64(1); len(outside) < 2000; id++ {
		if !inTestRanges(id) {
			outside = append(outside, id)
		}
	}
	db.Exec(t, `INSERT INTO users (id, email) SELECT id, 'out' FROM unnest($1::bigint[]) id`, outside)
	ctx := context.Background()
	set, err := tableset.Introspect(ctx, db.Pool, tableset.Spec{Name: "s", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "target")
	if err != nil {
		t.Fatal(err)
	}
	sum := func() int64 { return db.QueryInt64(t, `SELECT sum(hashtext(u::text)) FROM users u`) }
	before := sum()
	for _, tc := range []struct {
		name     string
		stageMin int
		staged   bool
	}{{"staged", 0, true}, {"text arrays", math.MaxInt32, false}} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
				t.Fatal(err)
			}
			st, err := ProbeApply(ctx, tx, set.Tables[0], ApplyProbeOptions{Ranges: testRanges, Rows: 2000, Inserts: 1, Updates: 2, Deletes: 1,
				FlushRows: 1500, StageMinRows: tc.stageMin})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v: %.0f changes/s", st, float64(st.Changes())/st.Elapsed.Seconds())
			if st.Inserts != 500 || st.Updates != 1000 || st.Deletes != 500 || st.Elapsed <= 0 || st.Staged != tc.staged || st.Flushes != 2 {
				t.Fatalf("stats %+v: want 500 inserts, 1,000 updates, 500 deletes in 2 flushes of at most 1,500, staged %v", st, tc.staged)
			}
			var written, left, outside int64
			if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE xmin = pg_current_xact_id()::xid), count(*),
				count(*) FILTER (WHERE email = 'out' AND xmin = pg_current_xact_id()::xid) FROM users`).Scan(&written, &left, &outside); err != nil {
				t.Fatal(err)
			}
			if written != 1500 || left != 5000-500 || outside != 0 {
				t.Errorf("in the probe's transaction: %d rows written (want 1,500: the updates and inserts), %d rows (want 4,500), %d outside the ranges written (want 0)", written, left, outside)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if got := sum(); got != before {
				t.Errorf("the table changed after the rollback")
			}
		})
	}
}
