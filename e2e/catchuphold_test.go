//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/workflows"
)

// catchUpHold holds a move in CDC_CATCH_UP with what an operator could do
// by hand, no hook in the product: a transaction on the target holds one
// row of the move's ranges FOR UPDATE, and a write of that row on the
// source follows, so the move's stream waits on the lock to apply it. A
// stream beside the copy (StreamDuringCopy) catches up within 70-100 ms of
// the copy's end, too short to land a failover in; held, its applied
// position stays before the write while the source's WAL goes on, so the
// lag gate (the scenario's small MaxLagBytes) keeps the move in
// CDC_CATCH_UP once its copy ends.
//
// The row is one the copy has committed on the target (a row there in the
// move's ranges is at or below its unit's last_pk): the copy never writes
// it again and the copy gate applies its changes, so the copy goes on
// beside the held stream and the move reaches CDC_CATCH_UP, not a stall in
// SNAPSHOT_COPY. The hold is taken early in the move's copy, since the
// lag must pass the gate before the copy ends.
type catchUpHold struct {
	c    *cluster
	mv   workflows.MoveSpec
	key  int64
	lock *pgx.Conn // on the target: the transaction holding key's row
	// Failover is the failover landed while held (set by the caller).
	Failover failoverRun
}

// holdInCatchUp waits for a move of migration id copying, holds its
// stream on the target (h, shard5) as catchUpHold says, writes the held
// key on the move's source until the source's WAL is 2×maxLag past the
// write, and returns once the move is in CDC_CATCH_UP with its stream
// waiting on the hold. It fails the test when the move leaves
// SNAPSHOT_COPY for another phase than CDC_CATCH_UP, or never leaves it.
func (c *cluster) holdInCatchUp(run client.WorkflowRun, id string, h *haShard, maxLag int64, deadline time.Time) *catchUpHold {
	t := c.t
	t.Helper()
	ctx := context.Background()
	hold := &catchUpHold{c: c, lock: c.dbs[h.name].Conn(t)}
	hold.lockCopiedRow(run, id, deadline)
	var pid int32
	if err := hold.lock.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	src := c.pools[hold.mv.Source]
	write := func() string {
		var lsn string
		if err := src.QueryRow(ctx, `UPDATE users SET balance = balance WHERE id = $1 RETURNING pg_current_wal_lsn()::text`, hold.key).Scan(&lsn); err != nil {
			t.Fatalf("write key %d on %s: %v", hold.key, hold.mv.Source, err)
		}
		return lsn
	}
	start, at := time.Now(), write()
	// The lag the move sees is the source's WAL past the stream's applied
	// position, which stays before the write's commit (at).
	writes := 1
	for {
		var past int64
		if err := src.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, at).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if past > 2*maxLag {
			break
		}
		if writes > 20_000 {
			t.Fatalf("%d writes of key %d on %s moved its WAL only %d bytes", writes, hold.key, hold.mv.Source, past)
		}
		write()
		writes++
	}
	// The stream waits on the hold (it may still be on its way to the write).
	for {
		var waiting int
		if err := c.dbs[h.name].Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing on %s waits on the row of key %d: %s", h.name, hold.key, c.describe(run.GetID()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := time.Now()
	t.Logf("move %s (%s→%s) held: key %d locked on %s, written %d times on %s from %s in %s; waiting for CDC_CATCH_UP",
		hold.mv.ID, hold.mv.Source, hold.mv.Target, hold.key, h.name, writes, hold.mv.Source, at, held.Sub(start).Round(time.Millisecond))
	for {
		ms, ok := c.moveState(id, hold.mv.ID)
		if ok && ms.Phase == workflows.PhaseCDCCatchUp {
			t.Logf("move %s in %s %s after the hold, lag %d bytes (gate %d)", hold.mv.ID, ms.Phase, time.Since(held).Round(time.Millisecond), ms.LagBytes, maxLag)
			return hold
		}
		if ok && ms.Phase != workflows.PhaseSnapshotCopy {
			t.Fatalf("move %s went from SNAPSHOT_COPY to %s, not held in CDC_CATCH_UP: %s", hold.mv.ID, ms.Phase, c.describe(run.GetID()))
		}
		if time.Now().After(deadline) {
			t.Fatalf("move %s never in CDC_CATCH_UP: %s", hold.mv.ID, c.describe(run.GetID()))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// lockCopiedRow waits for a move of migration id in SNAPSHOT_COPY with a
// users row of its ranges (none of the ledger's keys) committed on the
// target, and locks that row FOR UPDATE in a transaction of hold.lock left
// open; it sets hold.mv and hold.key. The target is asked, not the move's
// state, whose rows copied move only at a copy slice's end (2 s here):
// the hold is taken at the copy's first chunks, so that the writes behind
// it have the rest of the copy to pass the lag gate.
func (hold *catchUpHold) lockCopiedRow(run client.WorkflowRun, id string, deadline time.Time) {
	c, t, ctx := hold.c, hold.c.t, context.Background()
	t.Helper()
	for {
		st, ok := c.state(run.GetID())
		for _, m := range st.Moves {
			if ms, ok := c.moveState(id, m.Spec.ID); !ok || ms.Phase != workflows.PhaseSnapshotCopy {
				continue
			}
			tx, err := hold.lock.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var key int64
			err = tx.QueryRow(ctx, `SELECT id FROM users WHERE id > 400 AND id < 1000001 AND `+
				ring.Predicate("hashint8extended(id, 0)", m.Spec.Ranges)+` ORDER BY id LIMIT 1 FOR UPDATE`).Scan(&key)
			if errors.Is(err, pgx.ErrNoRows) { // none of its users copied yet
				_ = tx.Rollback(ctx)
				continue
			}
			if err != nil {
				t.Fatalf("lock a row of move %s on %s: %v", m.Spec.ID, m.Spec.Target, err)
			}
			hold.mv, hold.key = m.Spec, key
			return
		}
		if time.Now().After(deadline) || (ok && (st.Phase.Terminal() || beyond(st, workflows.PhaseSnapshotCopy))) {
			t.Fatalf("no move copying with a row of its ranges on the target: %s", c.describe(run.GetID()))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// release ends the hold's transaction (a killed target ended it already:
// the error is ignored).
func (hold *catchUpHold) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = hold.lock.Exec(ctx, `ROLLBACK`)
}

// judge checks, in the final state, that the held move was in
// CDC_CATCH_UP from before the failover began to after its promotion
// ended, and recorded the target's failover.
func (hold *catchUpHold) judge(st workflows.MigrationState) {
	t := hold.c.t
	t.Helper()
	f := hold.Failover
	if f.At.IsZero() {
		t.Fatal("no failover landed while the move was held")
	}
	for _, m := range st.Moves {
		if m.Spec.ID != hold.mv.ID {
			continue
		}
		var spans []string
		for _, pt := range m.Timings {
			if pt.Phase != workflows.PhaseCDCCatchUp {
				continue
			}
			spans = append(spans, fmt.Sprintf("%s–%s", pt.Start.Format("15:04:05.000"), pt.End.Format("15:04:05.000")))
			if !pt.Start.After(f.At) && !pt.End.IsZero() && pt.End.After(f.At.Add(f.Took)) {
				t.Logf("move %s in CDC_CATCH_UP %s–%s, the failover %s–%s; failover seen: %q",
					m.Spec.ID, pt.Start.Format("15:04:05.000"), pt.End.Format("15:04:05.000"),
					f.At.Format("15:04:05.000"), f.At.Add(f.Took).Format("15:04:05.000"), m.Failover)
				if m.Failover == "" {
					t.Errorf("move %s recorded no failover of its target", m.Spec.ID)
				}
				return
			}
		}
		t.Errorf("move %s was not in CDC_CATCH_UP throughout the failover (%s, %s): its CDC_CATCH_UP spans %v", m.Spec.ID,
			f.At.Format("15:04:05.000"), f.Took, spans)
		return
	}
	t.Errorf("move %s not in the final state", hold.mv.ID)
}
