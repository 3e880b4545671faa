package tableset

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reshard/reshard/testkit/pgtest"
)

var ddlTables = []Table{
	{Schema: "public", Name: "users", KeyColumn: "id", PK: []string{"id"}},
	{Schema: "public", Name: "orders", KeyColumn: "user_id", PK: []string{"id"}},
	{Schema: "app", Name: "Items", KeyColumn: "owner", PK: []string{"owner", "n"}},
}

func TestParseDDLAccepts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string // SQL as run
		kind []DDLKind
	}{
		{`ALTER TABLE users ADD COLUMN note text`, []string{`ALTER TABLE "public"."users" ADD COLUMN note text`}, []DDLKind{DDLAdditive}},
		{`alter table public.orders add column if not exists qty int default 0 not null;`, []string{`ALTER TABLE "public"."orders" add column if not exists qty int default 0 not null`}, []DDLKind{DDLAdditive}},
		{`ALTER TABLE users ADD a text DEFAULT 'x''y'::text, DROP COLUMN b, ALTER COLUMN c TYPE bigint`,
			[]string{`ALTER TABLE "public"."users" ADD a text DEFAULT 'x''y'::text`, `ALTER TABLE "public"."users" DROP COLUMN b`, `ALTER TABLE "public"."users" ALTER COLUMN c TYPE bigint`},
			[]DDLKind{DDLAdditive, DDLDrop, DDLAdditive}},
		{`ALTER TABLE app."Items" ALTER COLUMN v SET DATA TYPE numeric(20,2) USING v::numeric(20,2)`, []string{`ALTER TABLE "app"."Items" ALTER COLUMN v SET DATA TYPE numeric(20,2) USING v::numeric(20,2)`}, []DDLKind{DDLAdditive}},
		{`ALTER TABLE users ALTER id SET DEFAULT 7`, []string{`ALTER TABLE "public"."users" ALTER id SET DEFAULT 7`}, []DDLKind{DDLAdditive}},
		{`CREATE INDEX orders_total ON orders (total) WHERE total > 0`, []string{`CREATE INDEX CONCURRENTLY IF NOT EXISTS "orders_total" ON "public"."orders" (total) WHERE total > 0`}, []DDLKind{DDLAdditive}},
		{"-- a comment\nCREATE INDEX CONCURRENTLY IF NOT EXISTS \"Ix\" ON app.\"Items\" USING btree (v); /* two */ ALTER TABLE users DROP COLUMN IF EXISTS old CASCADE",
			[]string{`CREATE INDEX CONCURRENTLY IF NOT EXISTS "Ix" ON "app"."Items" USING btree (v)`, `ALTER TABLE "public"."users" DROP COLUMN IF EXISTS old CASCADE`}, []DDLKind{DDLAdditive, DDLDrop}},
	} {
		got, err := ParseDDL(c.in, ddlTables)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %d statements, want %d: %+v", c.in, len(got), len(c.want), got)
			continue
		}
		for i := range got {
			if got[i].SQL != c.want[i] || got[i].Kind != c.kind[i] {
				t.Errorf("%s:\n got %s (%s)\nwant %s (%s)", c.in, got[i].SQL, got[i].Kind, c.want[i], c.kind[i])
			}
		}
	}
}

func TestParseDDLRefuses(t *testing.T) {
	for _, c := range []struct{ in, reason string }{
		{`ALTER TABLE users ALTER COLUMN id TYPE text`, "id is the shard key of public.users: changing its type is refused"},
		{`ALTER TABLE orders ALTER user_id TYPE int`, "user_id is the shard key of public.orders"},
		{`ALTER TABLE orders ALTER COLUMN id SET DATA TYPE int`, "id is a primary-key column of public.orders"},
		{`ALTER TABLE orders DROP COLUMN user_id`, "user_id is the shard key of public.orders: dropping it is refused"},
		{`ALTER TABLE app."Items" DROP n`, "n is a primary-key column of app.Items"},
		{`ALTER TABLE users ALTER COLUMN id DROP NOT NULL`, "must stay NOT NULL"},
		{`ALTER TABLE users RENAME COLUMN name TO full_name`, "a rename is refused"},
		{`ALTER TABLE users RENAME TO people`, "a rename is refused"},
		{`ALTER TABLE users SET SCHEMA archive`, "identity"},
		{`ALTER TABLE users REPLICA IDENTITY FULL`, "replica identity"},
		{`ALTER TABLE users ADD PRIMARY KEY (id, name)`, "a primary-key change of public.users is refused"},
		{`ALTER TABLE users ADD CONSTRAINT users_pk2 PRIMARY KEY (id)`, "a primary-key change"},
		{`ALTER TABLE users DROP CONSTRAINT users_pkey`, "dropping a constraint is refused"},
		{`ALTER TABLE users ADD CONSTRAINT c CHECK (id > 0)`, "a constraint is not among"},
		{`ALTER TABLE users ADD COLUMN n bigserial`, "serial"},
		{`ALTER TABLE users ADD COLUMN n int GENERATED ALWAYS AS IDENTITY`, "identity column"},
		{`ALTER TABLE users ADD COLUMN at timestamptz DEFAULT now()`, "is not a constant"},
		{`ALTER TABLE users ADD COLUMN u uuid NOT NULL DEFAULT gen_random_uuid()`, "is not a constant"},
		{`ALTER TABLE users ADD COLUMN e text UNIQUE`, "carries a constraint (UNIQUE)"},
		{`ALTER TABLE users OWNER TO bob`, "cannot classify this ALTER TABLE action"},
		{`ALTER TABLE users ALTER COLUMN name SET STATISTICS 100`, "cannot classify this ALTER COLUMN name"},
		{`ALTER TABLE events ADD COLUMN x int`, "events is not a table of the keyspace"},
		{`CREATE UNIQUE INDEX u ON users (name)`, "a unique index"},
		{`CREATE INDEX ON users (name)`, "name the index"},
		{`DROP TABLE users`, "ALTER TABLE and CREATE INDEX only"},
		{`UPDATE users SET name = 'x'`, "ALTER TABLE and CREATE INDEX only"},
		{`ALTER TABLE users ADD COLUMN x int; DROP TABLE orders`, "ALTER TABLE and CREATE INDEX only"},
		{`DO $$ BEGIN END $$`, "dollar quoting"},
		{`   ;  `, "no statement"},
	} {
		_, err := ParseDDL(c.in, ddlTables)
		var re *RefusedDDLError
		if !errors.As(err, &re) {
			t.Errorf("%s: %v, want a refusal", c.in, err)
			continue
		}
		if !strings.Contains(err.Error(), c.reason) || !strings.Contains(err.Error(), "nothing was changed") {
			t.Errorf("%s:\n got %v\nwant it to say %q and that nothing was changed", c.in, err, c.reason)
		}
	}
}

func TestOrderShards(t *testing.T) {
	shards := []DDLShard{{Name: "shard1"}, {Name: "shard5", Target: true}, {Name: "shard2"}}
	names := func(ss []DDLShard) string {
		var n []string
		for _, s := range ss {
			n = append(n, s.Name)
		}
		return strings.Join(n, " ")
	}
	if got := names(OrderShards(shards, DDLAdditive)); got != "shard5 shard1 shard2" {
		t.Errorf("additive: %s, want the target first", got)
	}
	if got := names(OrderShards(shards, DDLDrop)); got != "shard1 shard2 shard5" {
		t.Errorf("drop: %s, want the target last", got)
	}
}

// TestApplyDDL runs changes on three real shards: applied on each, then
// already there on a second run; a lock held by the application makes one
// shard retry until it is released; a statement that fails stops before the
// shards after it.
func TestApplyDDL(t *testing.T) {
	ctx := context.Background()
	dbs := []*pgtest.DB{pgtest.NewDB(t, 0), pgtest.NewDB(t, 1), pgtest.NewDB(t, 0)}
	var shards []DDLShard
	for i, db := range dbs {
		db.Exec(t, preflightDDL)
		db.Exec(t, `INSERT INTO users SELECT g, 'u'||g, 'n' FROM generate_series(1, 100) g`)
		shards = append(shards, DDLShard{Name: []string{"shard1", "shard2", "shard5"}[i], Pool: db.Pool, Target: i == 2})
	}
	set, err := Introspect(ctx, dbs[0].Pool, preflightSpec, "shard1")
	if err != nil {
		t.Fatal(err)
	}
	stmts, err := ParseDDL(`ALTER TABLE users ADD COLUMN note text DEFAULT 'none', ALTER COLUMN name TYPE varchar(200);
		CREATE INDEX users_note ON users (note); ALTER TABLE users DROP COLUMN email`, set.Tables)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ApplyDDL(ctx, stmts, shards, DDLOptions{})
	if err != nil {
		t.Fatalf("apply: %v\n%+v", err, res)
	}
	var order []string
	for _, r := range res {
		t.Logf("%s: %s: %s %s", r.Shard, r.What, r.Outcome, r.Reason)
		order = append(order, r.Shard)
		if r.Outcome != DDLApplied {
			t.Errorf("%s on %s: %s, want applied", r.What, r.Shard, r.Outcome)
		}
	}
	if got := strings.Join(order, " "); got != "shard5 shard1 shard2 shard5 shard1 shard2 shard5 shard1 shard2 shard1 shard2 shard5" {
		t.Errorf("order %s: want the target first for additive changes, last for the drop", got)
	}
	for _, db := range dbs {
		if n := db.QueryInt64(t, `SELECT count(*) FROM users WHERE note = 'none'`); n != 100 {
			t.Errorf("%d rows with the new column's default, want 100", n)
		}
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'users'::regclass AND attname = 'email' AND NOT attisdropped`); n != 0 {
			t.Errorf("email was not dropped")
		}
		if n := db.QueryInt64(t, `SELECT count(*) FROM pg_index WHERE indexrelid = 'users_note'::regclass AND indisvalid`); n != 1 {
			t.Errorf("no valid index users_note")
		}
	}
	res, err = ApplyDDL(ctx, stmts, shards, DDLOptions{})
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	for _, r := range res {
		if r.Outcome != DDLAlreadyThere {
			t.Errorf("second run: %s on %s: %s, want already there", r.What, r.Shard, r.Outcome)
		}
	}

	// The application holds a lock on shard2's users for 400 ms: the
	// statement retries there (short lock_timeout) and goes through after.
	stmts, err = ParseDDL(`ALTER TABLE users ADD COLUMN late int`, set.Tables)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := dbs[1].Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE users IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(400 * time.Millisecond)
		_ = tx.Commit(ctx)
	}()
	start := time.Now()
	res, err = ApplyDDL(ctx, stmts, shards, DDLOptions{})
	wg.Wait()
	if err != nil {
		t.Fatalf("apply behind a lock: %v", err)
	}
	for _, r := range res {
		t.Logf("%s: %s after %d attempt(s)", r.Shard, r.Outcome, r.Attempts)
		if r.Shard == "shard2" && r.Attempts < 2 {
			t.Errorf("shard2 was locked for 400 ms but took %d attempt(s)", r.Attempts)
		}
	}
	t.Logf("applied behind a 400 ms lock in %s", time.Since(start).Round(time.Millisecond))

	// A lock held past the budget: shard2 fails, shard5 (target, first)
	// has it, the shard after shard2 is not attempted.
	stmts, _ = ParseDDL(`ALTER TABLE users ADD COLUMN later int`, set.Tables)
	tx, err = dbs[1].Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE users IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	shards[0], shards[1] = shards[1], shards[0] // shard2 before shard1
	res, err = ApplyDDL(ctx, stmts, shards, DDLOptions{Budget: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("apply past the budget: %v, want it to give up", err)
	}
	want := map[string]string{"shard5": DDLApplied, "shard2": DDLFailed, "shard1": DDLNotAttempted}
	for _, r := range res {
		if r.Outcome != want[r.Shard] {
			t.Errorf("%s: %s (%s), want %s", r.Shard, r.Outcome, r.Reason, want[r.Shard])
		}
	}
}
