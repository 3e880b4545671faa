package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// requireAccel skips a test of the accelerator where the server lacks the
// extension (make -C fence/ext/reshard_fence install), and fails it in CI,
// whose .ci/run installs it.
func requireAccel(t *testing.T, db *pgtest.DB) {
	t.Helper()
	if err := EnsureSchema(context.Background(), db.Pool); err != nil {
		t.Fatal(err)
	}
	has, err := ensureAccel(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if !has {
		if os.Getenv("CI") == "true" {
			t.Fatal("the extension reshard_fence is not installed on the test server and CI=true (.ci/run installs it)")
		}
		t.Skip("the extension reshard_fence is not installed on the test server: make -C fence/ext/reshard_fence install")
	}
}

// outcome is what one statement did: "ok", or its SQLSTATE and message.
func outcome(err error) string {
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &pe):
		return pe.Code + " " + pe.Message
	default:
		return err.Error()
	}
}

// TestAcceleratorRefusesAsThePlpgsqlFence: for each key type and each
// write (INSERT, UPDATE keeping, moving into and out of a fenced range,
// DELETE, a NULL key), a table whose triggers call the accelerator and its
// twin whose triggers call the plpgsql functions do the same: pass, or
// refuse with the same SQLSTATE and the same message, with nothing fenced,
// an untouched range fenced, and the key's range fenced. An open session's
// prepared statements see each fence change at once, as the plpgsql
// function's do.
func TestAcceleratorRefusesAsThePlpgsqlFence(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	requireAccel(t, db)
	app := db.Conn(t) // one session throughout: its plans and caches stay
	applier := db.Conn(t)
	if _, err := applier.Exec(ctx, "SET session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	for _, kt := range []struct{ typ, lit, keyOf string }{
		{"bigint", "$1::bigint", "%d"},
		{"integer", "$1::integer", "%d"},
		{"text", "$1::text", "key-%d"},
		{"uuid", "$1::uuid", "00000000-0000-0000-0000-%012d"},
	} {
		t.Run(kt.typ, func(t *testing.T) {
			var sets [2]tableset.Set
			for i, name := range []string{"accel_" + kt.typ, "plpgsql_" + kt.typ} {
				db.Exec(t, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, k %s, v text)", name, kt.typ))
				sets[i] = introspect(t, db, name, name, "k")
			}
			if err := InstallTriggers(ctx, db.Pool, sets[0], false); err != nil {
				t.Fatal(err)
			}
			if err := InstallPlpgsqlTriggers(ctx, db.Pool, sets[1]); err != nil {
				t.Fatal(err)
			}
			for i, accel := range []bool{true, false} {
				have, err := Inspect(ctx, db.Pool, sets[i])
				if err != nil {
					t.Fatal(err)
				}
				if have[0].Accelerated != accel || len(have[0].Problems) > 0 {
					t.Fatalf("%s: accelerated %v, problems %v; want accelerated %v and no problem", sets[i].Tables[0], have[0].Accelerated, have[0].Problems, accel)
				}
			}
			tokenOf := func(key string) int64 {
				return db.QueryInt64(t, "SELECT "+ring.TokenSQL(sets[0].Tables[0].KeyType, "", "k")+" FROM (SELECT "+kt.lit+" AS k) s", key)
			}
			a, b := fmt.Sprintf(kt.keyOf, 1), fmt.Sprintf(kt.keyOf, 2)
			ta, tb := tokenOf(a), tokenOf(b)
			untouched := ring.Range{Lo: ta + 1, Hi: ta + 2}
			if untouched.Contains(tb) {
				untouched = ring.Range{Lo: ta - 3, Hi: ta - 2}
			}
			fences := []struct {
				name   string
				ranges []ring.Range
			}{
				{"nothing fenced", nil},
				{"an untouched range fenced", []ring.Range{untouched}},
				{"a's range fenced", []ring.Range{{Lo: ta - 1, Hi: ta}}},
				{"b's range fenced", []ring.Range{{Lo: tb - 1, Hi: tb}}},
				{"everything fenced", []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}},
			}
			for _, f := range fences {
				var got [2][]string
				for i, set := range sets {
					tbl := set.Tables[0].Quoted()
					if err := Clear(ctx, db.Pool, set); err != nil {
						t.Fatal(err)
					}
					// The rows are written by the applier's role, which the
					// fence does not see.
					for _, q := range []string{"DELETE FROM " + tbl, "INSERT INTO " + tbl + " VALUES (1, " + kt.lit + ", 'x')"} {
						if _, err := applier.Exec(ctx, q, map[bool][]any{true: {a}}[len(q) > 12 && q[:6] == "INSERT"]...); err != nil {
							t.Fatal(err)
						}
					}
					if err := Fence(ctx, db.Pool, set, f.ranges, 4); err != nil {
						t.Fatal(err)
					}
					for _, q := range []struct {
						sql  string
						args []any
					}{
						{"INSERT INTO " + tbl + " VALUES (2, " + kt.lit + ", 'y')", []any{b}},
						{"UPDATE " + tbl + " SET v = 'z' WHERE id = 1", nil},
						{"UPDATE " + tbl + " SET k = " + kt.lit + " WHERE id = 1", []any{b}},
						{"UPDATE " + tbl + " SET k = " + kt.lit + " WHERE id = 1", []any{a}},
						{"INSERT INTO " + tbl + " VALUES (3, NULL, 'n')", nil},
						{"DELETE FROM " + tbl + " WHERE id = 1", nil},
					} {
						_, err := app.Exec(ctx, q.sql, q.args...)
						got[i] = append(got[i], outcome(err))
					}
				}
				for j := range got[0] {
					// The same message, but for the table's name.
					if strings.ReplaceAll(got[0][j], "public.accel_", "public.plpgsql_") != got[1][j] {
						t.Errorf("%s, statement %d: accelerated %q, plpgsql %q", f.name, j, got[0][j], got[1][j])
					}
				}
				t.Logf("%s: %q", f.name, got[0])
				// Something must be refused where a key's range is fenced,
				// and nothing but the NULL key where nothing is.
				refused := 0
				for _, o := range got[0] {
					if o != "ok" {
						refused++
					}
				}
				if want := map[string]bool{"nothing fenced": true, "an untouched range fenced": true}[f.name]; want && refused != 1 {
					t.Errorf("%s: %d statements refused, want only the NULL key's", f.name, refused)
				} else if !want && refused < 2 {
					t.Errorf("%s: %d statements refused, want the fenced key's too", f.name, refused)
				}
			}
		})
	}
}

// TestAcceleratorFailsClosed: an accelerated table whose fence function
// was dropped refuses every write instead of passing it; one whose
// accelerator was replaced by a function that fences nothing is found by
// Inspect, and Reconcile (topology check --repair) gives the table back a
// fence that refuses.
func TestAcceleratorFailsClosed(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	requireAccel(t, db)
	set := usersSet(t, db)
	ctl := controlFor(t, pgtest.NewDB(t, 1), mustTopology(t, twoShards, nil))
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	mine := keyWithToken(t, db, func(tok int64) bool { return tok <= 0 })
	theirs := keyWithToken(t, db, func(tok int64) bool { return tok > 0 })
	if have, err := Inspect(ctx, db.Pool, set); err != nil || !have[0].Accelerated {
		t.Fatalf("inspect: %+v, %v; want the accelerator", have, err)
	}
	db.Exec(t, "DROP FUNCTION "+triggerFunc(set.Tables[0]).Sanitize()+"()")
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", mine); err == nil {
		t.Fatal("a write passed an accelerated fence whose function is gone")
	} else {
		t.Logf("refused: %v", err)
	}
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", mine); err != nil {
		t.Fatalf("after the repair, a write of a key the shard owns: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", theirs); !router.IsFenceError(err) {
		t.Fatalf("after the repair, a write of a key b owns: %v", err)
	}
}

// TestAcceleratorNeedsNoPrivilegeOnReshard: an application role with
// privileges on its table only, none on the schema reshard, writes through
// the accelerated fence as through the plpgsql one: passes where the shard
// owns the key, RSF01 where it does not.
func TestAcceleratorNeedsNoPrivilegeOnReshard(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	requireAccel(t, db)
	set := usersSet(t, db)
	ctl := controlFor(t, pgtest.NewDB(t, 1), mustTopology(t, twoShards, nil))
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	if have, err := Inspect(ctx, db.Pool, set); err != nil || !have[0].Accelerated {
		t.Fatalf("inspect: %+v, %v; want the accelerator", have, err)
	}
	mine := keyWithToken(t, db, func(tok int64) bool { return tok <= 0 })
	theirs := keyWithToken(t, db, func(tok int64) bool { return tok > 0 })
	db.Exec(t, "DROP ROLE IF EXISTS fence_app")
	db.Exec(t, "CREATE ROLE fence_app")
	db.Exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON users TO fence_app")
	db.Exec(t, "REVOKE ALL ON SCHEMA reshard FROM PUBLIC")
	app := db.Conn(t)
	if _, err := app.Exec(ctx, "SET ROLE fence_app"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", mine); err != nil {
		t.Fatalf("a key the shard owns, as a role without USAGE on reshard: %v", err)
	}
	if _, err := app.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", theirs); !router.IsFenceError(err) {
		t.Fatalf("a key b owns, as a role without USAGE on reshard: %v, want RSF01", err)
	}
}
