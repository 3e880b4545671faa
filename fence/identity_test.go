package fence

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

func introspect(t *testing.T, db *pgtest.DB, name, table, key string) tableset.Set {
	t.Helper()
	set, err := tableset.Introspect(context.Background(), db.Pool, tableset.Spec{Name: name, Tables: []tableset.TableSpec{{Table: table, KeyColumn: key}}}, "shard")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestFencesOfLongNamesAreTheirOwn: two tables whose names agree on their
// first 52 characters, registered in two keyspaces with other key columns
// and other fenced ranges on one shard, each enforce their own ranges on
// their own key column. (On 6e755b7 both triggers called one function,
// reshard.fence_public_tenant_billing_invoice_line_items_history_archi:
// the last compiled won.)
func TestFencesOfLongNamesAreTheirOwn(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	const eu, us = "tenant_billing_invoice_line_items_history_archive_eu", "tenant_billing_invoice_line_items_history_archive_us"
	db.Exec(t, `CREATE TABLE `+eu+` (eu_id bigint PRIMARY KEY, v text)`)
	db.Exec(t, `CREATE TABLE `+us+` (id bigint PRIMARY KEY, us_id bigint NOT NULL, v text)`)
	euSet, usSet := introspect(t, db, "eu", eu, "eu_id"), introspect(t, db, "us", us, "us_id")
	for _, s := range []tableset.Set{euSet, usSet} {
		if err := InstallTriggers(ctx, db.Pool, s, false); err != nil {
			t.Fatal(err)
		}
	}
	// eu fences the low half of the token space, us the high half.
	low, high := ring.Range{Lo: ring.MinToken, Hi: 0}, ring.Range{Lo: 0, Hi: ring.MaxToken}
	if err := Fence(ctx, db.Pool, euSet, []ring.Range{low}, 3); err != nil {
		t.Fatal(err)
	}
	if err := Fence(ctx, db.Pool, usSet, []ring.Range{high}, 4); err != nil {
		t.Fatal(err)
	}
	for k := int64(1); k <= 40; k++ {
		lowKey := tokenOf(t, db, k) <= 0
		_, err := db.Pool.Exec(ctx, `INSERT INTO `+eu+` VALUES ($1, 'x')`, k)
		if lowKey != router.IsFenceError(err) || (!lowKey && err != nil) {
			t.Fatalf("eu key %d (token %d, fenced on eu: %v): %v", k, tokenOf(t, db, k), lowKey, err)
		}
		// The us table's key is us_id, not its primary key id: id 1000+k
		// has another token than us_id k.
		_, err = db.Pool.Exec(ctx, `INSERT INTO `+us+` VALUES ($1, $2, 'x')`, 1000+k, k)
		if lowKey == router.IsFenceError(err) || (lowKey && err != nil) {
			t.Fatalf("us key %d (token %d, fenced on us: %v): %v", k, tokenOf(t, db, k), !lowKey, err)
		}
		if err != nil && !strings.Contains(err.Error(), "topology version 4") {
			t.Fatalf("us refusal names another topology version than its own (4): %v", err)
		}
	}
}

// fenceNothing rewrites every function the table's reshard_* triggers
// depend on (the trigger functions and what their WHEN clauses call) so that
// it fences nothing, as restoring an old dump over the shard could.
func fenceNothing(t *testing.T, db *pgtest.DB, table string) int {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT DISTINCT p.oid::regproc::text, pg_get_function_identity_arguments(p.oid), p.prorettype::regtype::text
FROM pg_trigger g JOIN pg_depend d ON d.classid = 'pg_trigger'::regclass AND d.objid = g.oid AND d.refclassid = 'pg_proc'::regclass
JOIN pg_proc p ON p.oid = d.refobjid
WHERE g.tgrelid = $1::regclass AND g.tgname LIKE 'reshard%' AND g.tgname <> 'reshard_no_truncate'`, table)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct{ name, args, ret string }
	fns, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fn, error) {
		var f fn
		return f, r.Scan(&f.name, &f.args, &f.ret)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		switch f.ret {
		case "trigger":
			db.Exec(t, `CREATE OR REPLACE FUNCTION `+f.name+`(`+f.args+`) RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END $$`)
		case "boolean":
			db.Exec(t, `CREATE OR REPLACE FUNCTION `+f.name+`(`+f.args+`) RETURNS boolean LANGUAGE sql AS $$ SELECT false $$`)
		default:
			t.Fatalf("a fence trigger depends on %s(%s) returning %s", f.name, f.args, f.ret)
		}
	}
	return len(fns)
}

// TestCheckFindsAndRepairsAFenceFunctionThatFencesNothing: the trigger is
// in place but its function was replaced by one that fences nothing.
// Inspect and Compare (topology check) report it, Reconcile (--repair)
// compiles it again from the registry. (On 6e755b7 the check saw the
// trigger and the registry row, said nothing, and the repair left it.)
func TestCheckFindsAndRepairsAFenceFunctionThatFencesNothing(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	ctl := controlFor(t, pgtest.NewDB(t, 1), mustTopology(t, twoShards, nil))
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	theirs := keyWithToken(t, db, func(tok int64) bool { return tok > 0 })
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", theirs); !router.IsFenceError(err) {
		t.Fatalf("write of a key b owns: %v", err)
	}
	if n := fenceNothing(t, db, "users"); n == 0 {
		t.Fatal("the fence triggers depend on no function")
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", theirs); err != nil {
		t.Fatalf("the replaced function still fences: %v", err)
	}
	db.Exec(t, "DELETE FROM users")
	want, err := ctl.Want(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	have, err := Inspect(ctx, db.Pool, set)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare("a", want, have); len(d) == 0 {
		t.Fatalf("check of a fence function that fences nothing found no drift: %+v", have)
	} else {
		t.Logf("drift: %v", d)
	}
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", theirs); !router.IsFenceError(err) {
		t.Fatalf("write of a key b owns after the repair: %v", err)
	}
	have, err = Inspect(ctx, db.Pool, set)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare("a", want, have); len(d) != 0 {
		t.Fatalf("drift after the repair: %v", d)
	}
}

// TestFenceRefusesNullKeys: a row with a NULL key has no token, so no shard
// owns it; every shard refuses it (23502, not the fence's RSF01: a router
// retrying elsewhere would never succeed), with or without fenced ranges.
// An existing NULL-key row may still be deleted or given a key. (On
// 6e755b7 the insert was accepted by every shard.)
func TestFenceRefusesNullKeys(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint, v text)`)
	db.Exec(t, `INSERT INTO orders VALUES (1, NULL, 'before the fence')`)
	set := introspect(t, db, "app", "orders", "user_id")
	applier := db.Conn(t)
	if _, err := applier.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	for _, fenced := range [][]ring.Range{nil, {{Lo: 0, Hi: ring.MaxToken}}} {
		if err := Clear(ctx, db.Pool, set); err != nil {
			t.Fatal(err)
		}
		if err := Fence(ctx, db.Pool, set, fenced, 1); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{`INSERT INTO orders VALUES (2, NULL, 'x')`, `UPDATE orders SET user_id = NULL WHERE id = 3`} {
			db.Exec(t, `INSERT INTO orders VALUES (3, $1, 'y') ON CONFLICT DO NOTHING`, keyWithToken(t, db, func(tok int64) bool { return tok <= 0 }))
			_, err := db.Pool.Exec(ctx, q)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != pgerr.CodeNotNullViolation || !strings.Contains(pe.Message, "user_id") {
				t.Fatalf("fence %v: %s: %v; want SQLSTATE 23502 naming user_id", fenced, q, err)
			}
		}
	}
	db.Exec(t, `UPDATE orders SET user_id = $1 WHERE id = 1`, keyWithToken(t, db, func(tok int64) bool { return tok <= 0 }))
	if _, err := applier.Exec(ctx, `INSERT INTO orders VALUES (4, NULL, 'z')`); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `DELETE FROM orders WHERE id = 4`)

}

// TestReconcileTakesNoLockOnTheTable: once the triggers are installed, a
// reconcile that fences, unfences and turns the TRUNCATE guard on and off
// goes through while an application transaction holds ACCESS EXCLUSIVE on
// the table: it takes no lock on it, so it can neither queue the
// application's statements behind it nor deadlock with a transaction
// writing two tables. (On 6e755b7 the guard was a trigger created and
// dropped per move: the reconcile waited for the lock.)
func TestReconcileTakesNoLockOnTheTable(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	ctlDB := pgtest.NewDB(t, 1)
	ctl := controlFor(t, ctlDB, mustTopology(t, twoShards, nil))
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	app := db.Conn(t)
	if _, err := app.Exec(ctx, "BEGIN; LOCK TABLE users IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	part := ring.Range{Lo: -4e18, Hi: -1e18}
	moving := mustTopology(t, twoShards, []topology.RangeState{{Range: part, Owner: "a", Status: topology.Migrating, From: "a", To: "c"}})
	for i, top := range []topology.Topology{moving, mustTopology(t, twoShards, nil)} {
		if _, err := ctl.Store.Publish(ctx, int64(i+1), top); err != nil {
			t.Fatal(err)
		}
		for _, hold := range []bool{true, false} {
			if hold {
				if err := ctl.Hold(ctx, "a", "cutover m1", 1, []ring.Range{part}); err != nil {
					t.Fatal(err)
				}
			} else if err := ctl.Release(ctx, "a", "cutover m1", 1); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ch, err := Reconcile(rctx, db.Pool, "a", set, ctl)
			cancel()
			if err != nil {
				t.Fatalf("reconcile (topology v%d, hold %v) while the application holds the table: %v", i+2, hold, err)
			}
			if !ch.Changed() {
				t.Fatalf("reconcile (topology v%d, hold %v) changed nothing", i+2, hold)
			}
		}
	}
	if _, err := app.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	want, err := ctl.Want(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	have, err := Inspect(ctx, db.Pool, set)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare("a", want, have); len(d) != 0 {
		t.Fatalf("drift: %v", d)
	}
}

// TestReconcileUpgradesAnOlderInstall: a shard fenced by 6e755b7 (a fence
// function named after the table, a registry without identity or guard, a
// TRUNCATE guard trigger calling reshard.refuse_truncate) is brought to this
// version's objects by a reconcile, keeps its guard on meanwhile, and the
// older functions are dropped.
func TestReconcileUpgradesAnOlderInstall(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, `CREATE SCHEMA reshard;
CREATE TABLE reshard.fence (tbl regclass PRIMARY KEY, ranges int8multirange NOT NULL DEFAULT '{}', epoch bigint NOT NULL DEFAULT 0);
CREATE FUNCTION reshard.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	RAISE EXCEPTION 'reshard: TRUNCATE of %.% is refused while a move of its token ranges runs', TG_TABLE_SCHEMA, TG_TABLE_NAME USING ERRCODE = '`+pgerr.CodeTruncateRefused+`';
END $f$;
INSERT INTO reshard.fence VALUES ('users', '{(0,)}', 5);
CREATE FUNCTION reshard.fence_public_users() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
	IF hashint8extended(new.id, 0) <@ '{(0,)}'::int8multirange OR hashint8extended(old.id, 0) <@ '{(0,)}'::int8multirange THEN
		RAISE EXCEPTION 'fenced' USING ERRCODE = '`+pgerr.CodeFenced+`';
	END IF;
	IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
	RETURN NEW;
END $f$;
CREATE TRIGGER reshard_fence BEFORE INSERT OR UPDATE OR DELETE ON users FOR EACH ROW EXECUTE FUNCTION reshard.fence_public_users();
CREATE TRIGGER reshard_no_truncate BEFORE TRUNCATE ON users FOR EACH STATEMENT EXECUTE FUNCTION reshard.refuse_truncate();`)
	part := ring.Range{Lo: -4e18, Hi: -1e18}
	ctl := controlFor(t, pgtest.NewDB(t, 1), mustTopology(t, twoShards, []topology.RangeState{{Range: part, Owner: "a", Status: topology.Migrating, From: "a", To: "c"}}))
	if have, err := Inspect(ctx, db.Pool, set); err != nil || len(have[0].Problems) == 0 {
		t.Fatalf("check of an older install: %+v %v; want it reported", have, err)
	}
	// The schema upgrade alone (the first step of every install) carries
	// the guard over.
	if err := EnsureSchema(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if n := db.QueryInt64(t, "SELECT count(*) FROM reshard.fence WHERE guard"); n != 1 {
		t.Fatalf("the guard of the older install was not carried over: %d", n)
	}
	ch, err := Reconcile(ctx, db.Pool, "a", set, ctl)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Installed {
		t.Fatalf("reconcile of an older install: %+v", ch)
	}
	for _, fn := range []string{"reshard.fence_public_users()", "reshard.refuse_truncate()"} {
		if n := db.QueryInt64(t, "SELECT count(*) FROM pg_proc WHERE oid = to_regprocedure($1)", fn); n != 0 {
			t.Errorf("the older function %s is left", fn)
		}
	}
	want, err := ctl.Want(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	have, err := Inspect(ctx, db.Pool, set)
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare("a", want, have); len(d) != 0 {
		t.Fatalf("drift after the upgrade: %v", d)
	}
	theirs := keyWithToken(t, db, func(tok int64) bool { return tok > 0 })
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", theirs); !router.IsFenceError(err) || !strings.Contains(err.Error(), "topology version 5") {
		t.Fatalf("write of a key b owns after the upgrade: %v; want the fence since the older topology version 5", err)
	}
	var pe *pgconn.PgError
	if _, err := db.Pool.Exec(ctx, "TRUNCATE users"); !errors.As(err, &pe) || pe.Code != TruncateSQLState {
		t.Fatalf("TRUNCATE on a shard a live move uses, after the upgrade: %v", err)
	}
}
