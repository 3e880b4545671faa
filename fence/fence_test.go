package fence

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func usersSet(t *testing.T, db *pgtest.DB) tableset.Set {
	t.Helper()
	db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, v text)`)
	set, err := tableset.Introspect(context.Background(), db.Pool, tableset.Spec{Name: "app", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "shard")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func tokenOf(t *testing.T, db *pgtest.DB, id int64) int64 {
	return db.QueryInt64(t, "SELECT hashint8extended($1::bigint, 0)", id)
}

func TestFenceRefusesWritesInFencedRanges(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users SELECT g, 'x' FROM generate_series(1, 100) g")
	if err := InstallTriggers(ctx, db.Pool, set, true); err != nil {
		t.Fatal(err)
	}
	if err := InstallTriggers(ctx, db.Pool, set, true); err != nil {
		t.Fatalf("second install: %v", err)
	}
	// Fence exactly the token of key 7 (a range whose upper bound is that
	// token: inclusive) and check neighbours by token.
	tok7 := tokenOf(t, db, 7)
	fenced := []ring.Range{{Lo: tok7 - 1, Hi: tok7}}
	if err := Fence(ctx, db.Pool, set, fenced, 42); err != nil {
		t.Fatal(err)
	}
	_, err := db.Pool.Exec(ctx, "UPDATE users SET v = 'y' WHERE id = 7")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != router.FenceSQLState || !router.IsFenceError(err) {
		t.Fatalf("update of a fenced key: err %v, want SQLSTATE %s", err, router.FenceSQLState)
	}
	if !strings.Contains(pe.Message, "topology version 42") || !strings.Contains(pe.Message, "users") {
		t.Fatalf("fence message does not name the table and topology version: %s", pe.Message)
	}
	for _, q := range []string{"DELETE FROM users WHERE id = 7", "INSERT INTO users VALUES (7, 'z') ON CONFLICT (id) DO NOTHING",
		"UPDATE users SET id = 1007 WHERE id = 7" /* OLD key fenced */, "UPDATE users SET id = 7 WHERE id = 8" /* NEW key fenced */} {
		if _, err := db.Pool.Exec(ctx, q); !router.IsFenceError(err) {
			t.Errorf("%s: err %v, want fence error", q, err)
		}
	}
	if _, err := db.Pool.Exec(ctx, "UPDATE users SET v = 'ok' WHERE id <> 7 AND id <> 8"); err != nil {
		t.Fatalf("writes outside the fence refused: %v", err)
	}
	// Appliers pass the fence with session_replication_role = replica.
	c := db.Conn(t)
	if _, err := c.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "UPDATE users SET v = 'applier' WHERE id = 7"); err != nil {
		t.Fatalf("applier write refused: %v", err)
	}
	got, epoch, err := Fenced(ctx, db.Pool, set.Tables[0])
	if err != nil || len(got) != 1 || got[0] != fenced[0] || epoch != 42 {
		t.Fatalf("Fenced = %v epoch %d err %v, want %v", got, epoch, err, fenced)
	}
	if err := Clear(ctx, db.Pool, set); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "UPDATE users SET v = 'free' WHERE id = 7"); err != nil {
		t.Fatalf("write after unfence: %v", err)
	}
}

func TestFenceEdgesOfTokenSpace(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	// Fence everything: the wrap as two ranges touching MinToken and MaxToken.
	all := []ring.Range{{Lo: 0, Hi: ring.MaxToken}, {Lo: ring.MinToken, Hi: 0}}
	if err := Fence(ctx, db.Pool, set, all, 1); err != nil {
		t.Fatal(err)
	}
	got, _, err := Fenced(ctx, db.Pool, set.Tables[0])
	if err != nil || len(got) != 1 || got[0] != (ring.Range{Lo: ring.MinToken, Hi: ring.MaxToken}) {
		t.Fatalf("Fenced = %v, %v; want the whole space", got, err)
	}
	for i := int64(1); i <= 50; i++ {
		if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", i); !router.IsFenceError(err) {
			t.Fatalf("insert %d into a fully fenced table: %v", i, err)
		}
	}
	// Fence the low half only: tokens > 0 writable, tokens <= 0 not.
	if err := Clear(ctx, db.Pool, set); err != nil {
		t.Fatal(err)
	}
	if err := Fence(ctx, db.Pool, set, []ring.Range{{Lo: ring.MinToken, Hi: 0}}, 2); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 50; i++ {
		_, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", i)
		if tok := tokenOf(t, db, i); (tok > 0) != (err == nil) {
			t.Fatalf("key %d token %d: err %v", i, tok, err)
		}
	}
}

func TestTruncateGuard(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	if err := InstallTriggers(ctx, db.Pool, set, true); err != nil {
		t.Fatal(err)
	}
	_, err := db.Pool.Exec(ctx, "TRUNCATE users")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != TruncateSQLState {
		t.Fatalf("TRUNCATE during a move: %v", err)
	}
	if err := RemoveTriggers(ctx, db.Pool, set); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "TRUNCATE users"); err != nil {
		t.Fatalf("TRUNCATE after the triggers are removed: %v", err)
	}
	if n := db.QueryInt64(t, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'users'::regclass AND NOT tgisinternal"); n != 0 {
		t.Fatalf("%d triggers left", n)
	}
}

// A long transaction holding a lock on the table must not make trigger
// installation queue application writes: the DDL gives up after the lock
// timeout, retries, and succeeds once the transaction ends.
func TestInstallWaitsOutLongTransactionWithoutBlockingWriters(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users VALUES (1, 'a'), (2, 'b')")
	long := db.Conn(t)
	if _, err := long.Exec(ctx, "BEGIN; UPDATE users SET v = 'long' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- InstallTriggers(ctx, db.Pool, set, true) }()
	// While install is retrying, an application write still goes through
	// within well under the lock timeout budget most of the time.
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if _, err := db.Pool.Exec(ctx, "UPDATE users SET v = 'w' WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("application write waited %s behind trigger DDL", d)
	}
	select {
	case err := <-done:
		t.Fatalf("install finished while a transaction held the table: %v", err)
	case <-time.After(2500 * time.Millisecond):
	}
	if _, err := long.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("install did not finish after the long transaction ended")
	}
}

// The fenced ranges are compiled into the trigger: many disjoint ranges
// refuse exactly the keys whose token they hold, installing the trigger
// again keeps them, and Fenced reads the same ranges back.
func TestFenceManyRangesCompiledAndKeptByReinstall(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	// 43 ranges of 1/256 of the token space each, one every 3/128.
	var fenced []ring.Range
	step := uint64(1) << 57 // 2^64 / 128
	for i := uint64(0); i < 128; i += 3 {
		lo := ring.MinToken + int64(i*step)
		fenced = append(fenced, ring.Range{Lo: lo, Hi: lo + int64(step/2)})
	}
	if err := Fence(ctx, db.Pool, set, fenced, 9); err != nil {
		t.Fatal(err)
	}
	if err := InstallTriggers(ctx, db.Pool, set, true); err != nil {
		t.Fatal(err)
	}
	got, epoch, err := Fenced(ctx, db.Pool, set.Tables[0])
	if err != nil || len(got) != len(fenced) || epoch != 9 {
		t.Fatalf("Fenced = %d ranges epoch %d err %v, want %d ranges epoch 9", len(got), epoch, err, len(fenced))
	}
	refused := 0
	for k := int64(1); k <= 300; k++ {
		_, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", k)
		in := ring.ContainsAny(fenced, tokenOf(t, db, k))
		if in != router.IsFenceError(err) || (!in && err != nil) {
			t.Fatalf("key %d (token %d, fenced %v): err %v", k, tokenOf(t, db, k), in, err)
		}
		if in {
			refused++
		}
	}
	if refused < 20 || refused > 100 {
		t.Fatalf("%d of 300 keys refused; about 50 (43/256) expected", refused)
	}
	// Unfencing everything leaves the fast path: every write goes through.
	if err := Clear(ctx, db.Pool, set); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users SELECT g, 'y' FROM generate_series(1, 300) g ON CONFLICT (id) DO UPDATE SET v = 'y'"); err != nil {
		t.Fatalf("writes after unfencing every range: %v", err)
	}
	db.Exec(t, "DELETE FROM users")
	if n := db.QueryInt64(t, "SELECT count(*) FROM users"); n != 0 {
		t.Fatalf("%d rows left after deleting all", n)
	}
}
