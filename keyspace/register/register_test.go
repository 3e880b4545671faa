package register

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Init checks the tables against the planned ring before it publishes: rows
// on a shard that would not own them refuse it with nothing published or
// registered (a *pgerr.InputError naming the shard); once they are gone, Init
// publishes v1, registers the tables and fences each shard; a second Init
// publishes nothing; registering a table no shard has is refused.
func TestInitChecksBeforePublishing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	control := pgtest.NewDB(t, 0)
	if err := topology.Migrate(ctx, control.Pool); err != nil {
		t.Fatal(err)
	}
	dbs := map[string]*pgtest.DB{"shard1": pgtest.NewDB(t, 0), "shard2": pgtest.NewDB(t, 0)}
	dsns := map[string]string{}
	for n, db := range dbs {
		db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text)`)
		dsns[n] = db.DSN
	}
	open := func(ctx context.Context, names []string) (map[string]*pgxpool.Pool, func(), error) {
		pools := map[string]*pgxpool.Pool{}
		for _, n := range names {
			pools[n] = dbs[n].Pool
		}
		return pools, func() {}, nil
	}
	// Every key 1..200 on shard1: about half belong to shard2.
	dbs["shard1"].Exec(t, `INSERT INTO users SELECT g, 'u' FROM generate_series(1, 200) g`)
	store := topology.NewStore(control.Pool).In(topology.DefaultKeyspace)
	o := InitOptions{Keyspace: topology.DefaultKeyspace, DSNs: dsns, Members: []string{"shard1", "shard2"},
		Ring:   ring.Options{VNodes: 4, Tokens: ring.AllocBalanced},
		Tables: tableset.Spec{Name: topology.DefaultKeyspace, Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}}
	_, err := Init(ctx, store, control.Pool, open, o)
	var in *pgerr.InputError
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "shard shard1:") || !strings.Contains(err.Error(), "in ranges it does not own in the planned ring") ||
		!strings.Contains(err.Error(), "nothing was published or registered") {
		t.Fatalf("init over misplaced rows: %v", err)
	}
	if _, err := store.Current(ctx); !errors.Is(err, topology.ErrNoTopology) {
		t.Fatalf("a refused init published a topology: %v", err)
	}
	dbs["shard1"].Exec(t, `DELETE FROM users`)
	res, err := Init(ctx, store, control.Pool, open, o)
	if err != nil || !res.Published || res.Topology.Version != 1 || res.Keyspace == nil || len(res.Keyspace.Tables) != 1 || res.Keyspace.KeyType != ring.KeyInt {
		t.Fatalf("init: %+v, %v", res, err)
	}
	for n, db := range dbs {
		if db.QueryInt64(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'users'::regclass AND tgname = 'reshard_fence'`) != 1 {
			t.Errorf("%s has no fence trigger after init", n)
		}
	}
	again, err := Init(ctx, store, control.Pool, open, InitOptions{Keyspace: topology.DefaultKeyspace, DSNs: dsns, Members: []string{"shard1"}, Ring: o.Ring})
	if err != nil || again.Published || again.Topology.Version != 1 || len(again.Topology.Ring.Shards()) != 2 {
		t.Fatalf("second init: %+v, %v", again, err)
	}
	_, err = Tables(ctx, store, control.Pool, open, topology.DefaultKeyspace, tableset.Spec{Name: topology.DefaultKeyspace, Tables: []tableset.TableSpec{{Table: "userz", KeyColumn: "id"}}})
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "userz") || !strings.Contains(err.Error(), "nothing was registered") {
		t.Fatalf("register a table no shard has: %v", err)
	}

	// A migration moves every registered table: none named takes them, a
	// different set is refused naming the registered ones.
	ks, spec, reg, err := MigrationTables(ctx, store, "", tableset.Spec{})
	if err != nil || ks != topology.DefaultKeyspace || reg || len(spec.Tables) != 1 || spec.Tables[0].Table != "users" {
		t.Fatalf("migration tables: %s %+v %v %v", ks, spec, reg, err)
	}
	_, _, _, err = MigrationTables(ctx, store, "", tableset.Spec{Tables: []tableset.TableSpec{{Table: "orders", KeyColumn: "user_id"}}})
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "give --table public.users:id") {
		t.Fatalf("migration of other tables: %v", err)
	}
}
