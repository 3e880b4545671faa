//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/workflows"
)

// TestSchemaApplyInEveryPhase: under the ledger writers, reshard schema
// apply changes every shard while an add-node runs — a column added and one
// dropped, and an index built, during SNAPSHOT_COPY; a column added and one
// dropped while the moves catch up (waiting for approval); a column added
// and one dropped in GRACE, when the reverse streams run — and a key change
// is refused. Values written into the new columns on the owners reach the
// new owner (forward) and the old one (reverse); the migration ends with
// every acknowledged write on its owner.
func TestSchemaApplyInEveryPhase(t *testing.T) { schemaApplyInEveryPhase(t, false) }

// TestSchemaApplyInEveryPhaseStreamDuringCopy is the same with the moves'
// streams running beside their copies (--stream-during-copy): the gate
// skips changes the copy will read, so a column added during the copy must
// reach the copy's reads (it lost 4 rows' values before backfill's check).
func TestSchemaApplyInEveryPhaseStreamDuringCopy(t *testing.T) { schemaApplyInEveryPhase(t, true) }

func schemaApplyInEveryPhase(t *testing.T, streamDuringCopy bool) {
	wall(t)
	c := newCluster(t, 5_000)
	c.registerKeyspace()
	c.startWorker()
	c.startWriters()
	apply := func(when, sql string) {
		t.Helper()
		start := time.Now()
		out, code := c.cli("schema", "apply", sql)
		t.Logf("%s: schema apply %q: exit %d in %s\n%s", when, sql, code, time.Since(start).Round(time.Millisecond), out)
		if code != 0 || strings.Contains(out, "failed") {
			t.Fatalf("%s: schema apply failed", when)
		}
	}
	out, code := c.cli("schema", "apply", "ALTER TABLE users ADD COLUMN unused int; ALTER TABLE orders ALTER COLUMN user_id TYPE int")
	if code != 2 || !strings.Contains(out, "user_id is the shard key of public.orders") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("a key change: exit %d, want 2 with the reason\n%s", code, out)
	}
	for name, db := range c.dbs {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'users'::regclass AND attname = 'unused'`); n != 0 {
			t.Fatalf("the refused script changed %s", name)
		}
	}
	req := c.request("ddl_phases")
	if streamDuringCopy {
		req.ID = "ddl_phases_gated"
	}
	req.StreamDuringCopy = streamDuringCopy
	req.Throttle = workflows.Throttle{RowsPerSec: 100} // a copy of ~650 rows per move: several seconds
	req.RequireApproval = true
	req.GracePeriod = new(10 * time.Minute)
	run := c.start(req)
	deadline := time.Now().Add(8 * time.Minute)
	c.waitFor(run, deadline, "a move copying", func(st workflows.MigrationState) bool {
		for _, m := range st.Moves {
			if m.Phase == workflows.PhaseSnapshotCopy {
				return true
			}
		}
		return false
	})
	// Users above the ledger's keys are never written by the writers: the
	// values set here must end on whichever shard owns them.
	setOn := func(col, prefix string, mod int) {
		for i := 1; i <= 4; i++ {
			c.dbs[shard(i)].Exec(t, `UPDATE users SET `+col+` = '`+prefix+`' || id WHERE id > 400 AND id < 1000000 AND id % 10 = $1`, mod)
		}
	}
	apply("SNAPSHOT_COPY", "ALTER TABLE users ADD COLUMN c1 text, ADD COLUMN d1 int DEFAULT 7; CREATE INDEX users_c1 ON users (c1)")
	setOn("c1", "copy-", 0)
	if st, _ := c.state(run.GetID()); func() bool { _, ok := anyIn(st, workflows.PhaseSnapshotCopy); return !ok }() {
		t.Logf("the copy ended while schema apply ran: %s", summary(st))
	}
	c.waitFor(run, deadline, "every move waiting for approval", func(st workflows.MigrationState) bool {
		return allPast(st, workflows.PhaseVerify)
	})
	apply("CDC_CATCH_UP", "ALTER TABLE users DROP COLUMN d1, ADD COLUMN c3 text")
	setOn("c3", "cdc-", 1)
	checkCol := func(when, col, prefix string, mod int, shards ...string) {
		t.Helper()
		for start := time.Now(); ; {
			bad := int64(0)
			for _, s := range shards {
				bad += c.dbs[s].QueryInt64(t, `SELECT count(*) FROM users WHERE id > 400 AND id < 1000000 AND id % 10 = $1 AND `+col+` IS DISTINCT FROM '`+prefix+`' || id`, mod)
			}
			if bad == 0 {
				return
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("%s: %d users on %v lack %s = '%s' || id\n%s", when, bad, shards, col, prefix, c.workerLogs())
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	checkCol("catch-up", "c3", "cdc-", 1, shard(5))
	checkCol("catch-up", "c1", "copy-", 0, shard(5))
	c.approve(run.GetID())
	st := c.waitFor(run, deadline, "every move in GRACE", func(st workflows.MigrationState) bool {
		return allPast(st, workflows.PhaseCutover)
	})
	apply("GRACE", "ALTER TABLE users ADD COLUMN c4 text; ALTER TABLE users DROP COLUMN c3")
	c.dbs[shard(5)].Exec(t, `UPDATE users SET c4 = 'grace-' || id WHERE id > 400 AND id < 1000000 AND id % 10 = 2`)
	// The reverse streams bring them back to the old owners' moved rows.
	for _, m := range st.Moves {
		for start := time.Now(); ; {
			bad := c.dbs[m.Spec.Source].QueryInt64(t, `SELECT count(*) FROM users WHERE id > 400 AND id < 1000000 AND id % 10 = 2 AND `+
				ring.Predicate("hashint8extended(id, 0)", m.Spec.Ranges)+` AND c4 IS DISTINCT FROM 'grace-' || id`)
			if bad == 0 {
				break
			}
			if time.Since(start) > 2*time.Minute {
				t.Fatalf("GRACE: %d moved users on %s lack the c4 written on shard5\n%s", bad, m.Spec.Source, c.workerLogs())
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if _, err := c.update(run.GetID(), workflows.UpdateComplete); err != nil {
		t.Fatalf("complete: %v", err)
	}
	st = c.wait(run, time.Until(deadline)+2*time.Minute)
	c.stopWriters()
	t.Logf("moves: %s", summary(st))
	doneState(t, st)
	c.checkData(st)
	all := []string{shard(1), shard(2), shard(3), shard(4), shard(5)}
	checkCol("after cleanup", "c1", "copy-", 0, all...)
	for name, db := range c.dbs {
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_index WHERE indexrelid = 'users_c1'::regclass AND indisvalid`); n != 1 {
			t.Errorf("%s: no valid index users_c1", name)
		}
	}
}
