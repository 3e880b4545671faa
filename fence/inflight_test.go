package fence

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/pgtest"
)

// updateV is the one UPDATE the sessions of these tests run: pgx prepares it
// once per connection and then re-executes the prepared statement, as an
// application's driver does.
const updateV = "UPDATE users SET v = $2 WHERE id = $1"

// A REPEATABLE READ transaction whose snapshot predates the fence is waited
// for (it may have passed the trigger), and reported when it outlives the
// budget. Having only read the table before the fence, it must take a new
// lock to write, sees the fence function compiled by the fence, and is
// refused: stricter than the registry read under its old snapshot the
// trigger used to do, which let it through.
func TestWaitInFlightCatchesRepeatableReadOpenedBeforeFence(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users VALUES (7, 'a'), (8, 'b')")
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	rr := db.Conn(t)
	// The fence function compiled and cached in this session before.
	if _, err := rr.Exec(ctx, updateV, int64(8), "warm"); err != nil {
		t.Fatal(err)
	}
	if _, err := rr.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM users"); err != nil {
		t.Fatal(err)
	}
	tok := tokenOf(t, db, 7)
	if err := Fence(ctx, db.Pool, set, []ring.Range{{Lo: tok - 1, Hi: tok}}, 1); err != nil {
		t.Fatal(err)
	}
	horizon, err := HorizonNow(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	var obe *OverBudgetError
	err = WaitInFlight(ctx, db.Pool, horizon, nil, 300*time.Millisecond)
	if !errors.As(err, &obe) || len(obe.Blockers) != 1 || obe.Blockers[0].PID != int32(rr.PgConn().PID()) {
		t.Fatalf("WaitInFlight with the transaction open: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- WaitInFlight(ctx, db.Pool, horizon, nil, 10*time.Second) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WaitInFlight returned while the transaction was open: %v", err)
	default:
	}
	if _, err := rr.Exec(ctx, updateV, int64(7), "after fence"); !router.IsFenceError(err) {
		t.Fatalf("write of a fenced key by a REPEATABLE READ transaction that only read before the fence: %v, want the fence error", err)
	}
	if _, err := rr.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitInFlight after the transaction ended: %v", err)
	}
	// A transaction started after the fence sees it and is not waited for.
	late := db.Conn(t)
	if _, err := late.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM users"); err != nil {
		t.Fatal(err)
	}
	if err := WaitInFlight(ctx, db.Pool, horizon, nil, time.Second); err != nil {
		t.Fatalf("a transaction begun after the fence was waited for: %v", err)
	}
	if _, err := late.Exec(ctx, "UPDATE users SET v = 'late' WHERE id = 7"); !router.IsFenceError(err) {
		t.Fatalf("write of a transaction begun after the fence: %v", err)
	}
}

// A transaction that holds ROW EXCLUSIVE on the table since before the fence
// re-executes a prepared write without taking a new lock, so it does not
// process the fence's invalidation and may run the fence function it had
// compiled before: its fenced write passes. The wait must hold until it
// ends, whether it already has an xid (it wrote) or not (READ COMMITTED,
// its earlier write matched no row: no xid, no snapshot between statements).
func TestWaitInFlightCatchesLockHoldersFromBeforeFence(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users VALUES (7, 'a'), (8, 'b')")
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	tok := tokenOf(t, db, 7)
	fenced := []ring.Range{{Lo: tok - 1, Hi: tok}}
	for _, tc := range []struct {
		name, begin string
		before      int64 // key written before the fence
	}{
		{"read committed, no row written", "BEGIN", -1},
		{"read committed, a row written", "BEGIN", 8},
		{"repeatable read, a row written", "BEGIN ISOLATION LEVEL REPEATABLE READ", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := db.Conn(t)
			if _, err := c.Exec(ctx, updateV, int64(8), "warm"); err != nil { // compiled, prepared
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, tc.begin); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, updateV, tc.before, "before fence"); err != nil {
				t.Fatal(err)
			}
			if err := Fence(ctx, db.Pool, set, fenced, 1); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := Clear(ctx, db.Pool, set); err != nil {
					t.Error(err)
				}
			})
			horizon, err := HorizonNow(ctx, db.Pool)
			if err != nil {
				t.Fatal(err)
			}
			var obe *OverBudgetError
			err = WaitInFlight(ctx, db.Pool, horizon, nil, 200*time.Millisecond)
			if !errors.As(err, &obe) || len(obe.Blockers) != 1 || obe.Blockers[0].PID != int32(c.PgConn().PID()) {
				t.Fatalf("WaitInFlight with the transaction open (horizon %+v): %v", horizon, err)
			}
			// The hazard itself: refused is fine, passed must be waited for.
			_, werr := c.Exec(ctx, updateV, int64(7), "after fence")
			if werr != nil && !router.IsFenceError(werr) {
				t.Fatal(werr)
			}
			t.Logf("fenced write of the transaction: %v", werr)
			done := make(chan error, 1)
			go func() { done <- WaitInFlight(ctx, db.Pool, horizon, nil, 10*time.Second) }()
			time.Sleep(200 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("WaitInFlight returned while the transaction was open: %v", err)
			default:
			}
			if _, err := c.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("WaitInFlight after the transaction ended: %v", err)
			}
			// Its next transaction uses the new function.
			if _, err := c.Exec(ctx, updateV, int64(7), "next"); !router.IsFenceError(err) {
				t.Fatalf("fenced write in a new transaction: %v", err)
			}
		})
	}
}

// After a fence commits, a write in a new transaction, or in a statement
// parsed after it, is refused at once, even in a session that had the fence
// function compiled and the statement prepared, and in a READ COMMITTED
// transaction that wrote the table before the fence.
func TestFenceSeenByLaterStatements(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users VALUES (7, 'a'), (8, 'b')")
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	auto, inTx := db.Conn(t), db.Conn(t)
	for _, c := range []*pgx.Conn{auto, inTx} {
		if _, err := c.Exec(ctx, updateV, int64(7), "warm"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := inTx.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := inTx.Exec(ctx, updateV, int64(8), "before fence"); err != nil {
		t.Fatal(err)
	}
	tok := tokenOf(t, db, 7)
	if err := Fence(ctx, db.Pool, set, []ring.Range{{Lo: tok - 1, Hi: tok}}, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := auto.Exec(ctx, updateV, int64(7), "after fence"); !router.IsFenceError(err) {
		t.Fatalf("prepared write in a new transaction after the fence: %v", err)
	}
	// A new statement text is parsed, which opens the table and processes
	// the fence's invalidation even though the lock is already held.
	if _, err := inTx.Exec(ctx, "UPDATE users SET v = 'parsed after fence' WHERE id = 7", pgx.QueryExecModeSimpleProtocol); !router.IsFenceError(err) {
		t.Fatalf("new statement after the fence in a transaction that wrote before it: %v", err)
	}
	if _, err := inTx.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
}

// A transaction prepared for two-phase commit before the fence has no
// session, yet its write passed the trigger and commits whenever COMMIT
// PREPARED comes: the wait must hold for it.
func TestWaitInFlightCatchesPreparedTransaction(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users VALUES (7, 'a')")
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	c := db.Conn(t)
	gid := "reshard_test_" + db.Name
	if _, err := c.Exec(ctx, "BEGIN; UPDATE users SET v = 'prepared' WHERE id = 7; PREPARE TRANSACTION '"+gid+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })
	tok := tokenOf(t, db, 7)
	if err := Fence(ctx, db.Pool, set, []ring.Range{{Lo: tok - 1, Hi: tok}}, 1); err != nil {
		t.Fatal(err)
	}
	horizon, err := HorizonNow(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	var obe *OverBudgetError
	err = WaitInFlight(ctx, db.Pool, horizon, nil, 300*time.Millisecond)
	if !errors.As(err, &obe) || len(obe.Blockers) != 1 || obe.Blockers[0].State != "prepared" || !strings.Contains(obe.Error(), gid) {
		t.Fatalf("WaitInFlight with a prepared transaction: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "COMMIT PREPARED '"+gid+"'"); err != nil {
		t.Fatal(err)
	}
	if err := WaitInFlight(ctx, db.Pool, horizon, nil, time.Second); err != nil {
		t.Fatalf("WaitInFlight after COMMIT PREPARED: %v", err)
	}
}

// workersOf waits until leader's statement runs in parallel workers and
// returns their pids.
func workersOf(t *testing.T, db *pgtest.DB, leader int32) []int32 {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var pids []int32
		err := db.Pool.QueryRow(context.Background(), `
			SELECT coalesce(array_agg(pid ORDER BY pid), '{}') FROM pg_stat_activity
			WHERE backend_type = 'parallel worker' AND leader_pid = $1 AND backend_xmin IS NOT NULL`, leader).Scan(&pids)
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) > 0 {
			return pids
		}
	}
	t.Fatalf("no parallel worker of pid %d showed up", leader)
	return nil
}

// A statement begun before the fence that runs in parallel: its workers are
// background workers (backend_type 'parallel worker'), not client backends,
// with the statement's snapshot xmin; they are waited for along with their
// leader. An excluded session's workers are excluded with it.
func TestInFlightCountsBackgroundWorkers(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users SELECT g, 'x' FROM generate_series(1, 2000) g")
	db.Exec(t, "ANALYZE users")
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	leader := db.Conn(t)
	if _, err := leader.Exec(ctx, `SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
		SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 2`); err != nil {
		t.Fatal(err)
	}
	lpid := int32(leader.PgConn().PID())
	running := make(chan error, 1)
	go func() {
		// About half a minute over three processes; cancelled below.
		_, err := leader.Exec(ctx, "SELECT count(*) FROM users WHERE pg_sleep(0.05) IS NOT NULL")
		running <- err
	}()
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "SELECT pg_cancel_backend($1)", lpid)
		<-running
	})
	workers := workersOf(t, db, lpid)
	tok := tokenOf(t, db, 7)
	if err := Fence(ctx, db.Pool, set, []ring.Range{{Lo: tok - 1, Hi: tok}}, 1); err != nil {
		t.Fatal(err)
	}
	horizon, err := HorizonNow(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	bl, err := InFlight(ctx, db.Pool, horizon, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]string{}
	for _, b := range bl {
		got[b.PID] = b.BackendType
	}
	if got[lpid] != "client backend" {
		t.Errorf("leader pid %d not waited for as a client backend; blockers %v", lpid, bl)
	}
	for _, w := range workers {
		if got[w] != "parallel worker" {
			t.Errorf("parallel worker pid %d with the statement's snapshot not waited for; blockers %v", w, bl)
		}
	}
	if bl, err := InFlight(ctx, db.Pool, horizon, []int32{lpid}); err != nil || len(bl) != 0 {
		t.Errorf("with the leader excluded: blockers %v (%v), want none of its workers either", bl, err)
	}
}

// PostgreSQL's logical replication apply worker is a background worker that
// writes with session_replication_role = replica, for which the fence
// trigger does not fire: it is not waited for, even inside a transaction
// begun before the fence (here blocked on a lock).
func TestInFlightIgnoresLogicalReplicationWorkers(t *testing.T) {
	ctx := context.Background()
	pub, sub := pgtest.NewDB(t, 0), pgtest.NewDB(t, 0)
	pub.Exec(t, "CREATE TABLE users (id bigint PRIMARY KEY, v text)")
	pub.Exec(t, "CREATE PUBLICATION p FOR TABLE users")
	slot := "sub_" + sub.Name
	// A subscription to the same server cannot create its slot itself.
	pub.Exec(t, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	usersSet(t, sub)
	sub.Exec(t, "CREATE SUBSCRIPTION s CONNECTION '"+pub.DSN+"' PUBLICATION p WITH (create_slot = false, slot_name = '"+slot+"', copy_data = false)")
	t.Cleanup(func() { _, _ = sub.Pool.Exec(context.Background(), "DROP SUBSCRIPTION s") })
	locker := sub.Conn(t)
	if _, err := locker.Exec(ctx, "BEGIN; LOCK TABLE users IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	pub.Exec(t, "INSERT INTO users VALUES (7, 'a')")
	var apply int32
	for deadline := time.Now().Add(30 * time.Second); apply == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the apply worker did not start a transaction")
		}
		err := sub.Pool.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE backend_type = 'logical replication worker' AND datname = current_database()
			  AND backend_xmin IS NOT NULL AND wait_event_type = 'Lock'`).Scan(&apply)
		if err != nil {
			t.Fatal(err)
		}
	}
	sub.Exec(t, "SELECT pg_current_xact_id()") // the horizon passes the worker's xmin
	horizon, err := HorizonNow(ctx, sub.Pool)
	if err != nil {
		t.Fatal(err)
	}
	bl, err := InFlight(ctx, sub.Pool, horizon, []int32{int32(locker.PgConn().PID())})
	if err != nil || len(bl) != 0 {
		t.Fatalf("with the apply worker (pid %d) in a transaction begun before the horizon %+v: blockers %v (%v), want none", apply, horizon, bl, err)
	}
	if _, err := locker.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
}
