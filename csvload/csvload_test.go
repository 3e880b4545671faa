package csvload

import (
	"context"
	"errors"
	"fmt"
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

// Load puts each row on its owner and only there, or refuses a file with a
// bad line or header (a *pgerr.InputError naming the line) with nothing loaded
// on any shard, whichever shard the bad line goes to and however many
// batches were copied before it.
func TestLoadAllOrNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbs := map[string]*pgtest.DB{"shard1": pgtest.NewDB(t, 0), "shard2": pgtest.NewDB(t, 0)}
	for _, db := range dbs {
		db.Exec(t, `CREATE TABLE small (k smallint PRIMARY KEY, v int, g int GENERATED ALWAYS AS (v * 2) STORED);
			CREATE TABLE named (k text PRIMARY KEY, v int)`)
	}
	r, err := ring.Build([]ring.Shard{{Name: "shard1"}, {Name: "shard2"}}, ring.Options{VNodes: 4, Tokens: ring.AllocBalanced})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.New(r, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	load := func(table, kt, body string) (map[string]int64, error) {
		keyType := ring.KeyInt
		if kt == "text" {
			keyType = ring.KeyText
		}
		return Load(ctx, strings.NewReader(body), Options{Topology: topo, KeyType: keyType, BatchRows: 2,
			Table: tableset.TableSpec{Schema: "public", Table: table, KeyColumn: "k"},
			Connect: func(ctx context.Context, shard string) (*pgxpool.Pool, error) {
				return pgxpool.NewWithConfig(ctx, dbs[shard].Pool.Config())
			}})
	}
	good := func() string {
		var b strings.Builder
		b.WriteString("k,v\n")
		for i := 1; i <= 30; i++ {
			fmt.Fprintf(&b, "%d,%d\n", i, i)
		}
		return b.String()
	}
	count := func(table string) int64 {
		return dbs["shard1"].QueryInt64(t, `SELECT count(*) FROM `+table) + dbs["shard2"].QueryInt64(t, `SELECT count(*) FROM `+table)
	}
	for _, tc := range []struct{ name, table, kt, body, want string }{
		{"smallint key out of range", "small", "int", good() + "70000,1\n", `CSV line 32: value "70000" is out of range for type smallint`},
		{"non-numeric value", "small", "int", good() + "31,abc\n", `CSV line 32: invalid input syntax for type integer: "abc"`},
		{"invalid UTF-8 text key", "named", "text", good() + "x\xff,1\n", "CSV line 32: the shard key k is not valid UTF-8"},
		{"NULL key", "named", "text", good() + ",1\n", "CSV line 32: the shard key k is empty"},
		{"short line", "small", "int", good() + "31\n", "CSV line 32 has 1 field(s), the header 2"},
		{"unknown column", "small", "int", "k,w\n1,2\n", `the CSV header names "w", which is not a column of public.small (its columns: k, v)`},
		{"generated column", "small", "int", "k,v,g\n1,2,4\n", `"g", a generated column`},
		{"no key column", "small", "int", "v\n1\n", "has no column k, the shard key of public.small"},
	} {
		_, err := load(tc.table, tc.kt, tc.body)
		var in *pgerr.InputError
		if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was loaded") {
			t.Errorf("%s: %v, want a *pgerr.InputError with %q", tc.name, err, tc.want)
		}
		if n := count(tc.table); n != 0 {
			t.Errorf("%s: %d rows loaded, want none", tc.name, n)
		}
	}
	counts, err := load("small", "int", good())
	if err != nil || counts["shard1"]+counts["shard2"] != 30 || count("small") != 30 {
		t.Fatalf("good file: %v, %v (%d rows in the tables)", counts, err, count("small"))
	}
	for shard, db := range dbs {
		misplaced := 0
		for k := int64(1); k <= 30; k++ {
			if topo.Ring.Owner(ring.TokenInt64(k)) != shard && db.QueryInt64(t, `SELECT count(*) FROM small WHERE k = $1`, k) != 0 {
				misplaced++
			}
		}
		if misplaced > 0 || db.QueryInt64(t, `SELECT count(*) FROM small`) != counts[shard] {
			t.Errorf("%s: %d rows not its own, %d counted for it", shard, misplaced, counts[shard])
		}
	}
}

// Table finds a registered table by its name or schema.table, and names the
// keyspace's tables when it is not there.
func TestTable(t *testing.T) {
	k := topology.Keyspace{Name: "default", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}, {Schema: "billing", Table: "invoices", KeyColumn: "customer_id"}}}
	for name, want := range map[string]string{"users": "public.users", "public.users": "public.users", "billing.invoices": "billing.invoices", "invoices": "billing.invoices"} {
		if ts, q, err := Table(k, name); err != nil || q != want || ts.KeyColumn == "" {
			t.Errorf("Table(%s) = %+v, %q, %v; want %s", name, ts, q, err, want)
		}
	}
	var in *pgerr.InputError
	if _, _, err := Table(k, "orders"); !errors.As(err, &in) || !strings.Contains(err.Error(), "its tables: users, invoices") {
		t.Errorf("Table(orders): %v", err)
	}
}
