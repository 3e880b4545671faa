package cutover

import (
	"context"
	"os"
	"testing"

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
