package shardschema

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// Parse reads the keyspace's tables on the first shard and refuses, as an
// *pgerr.InputError, a keyspace without shards and a statement schema apply does
// not run.
func TestParse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, name text)`)
	spec := tableset.Spec{Name: "default", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}
	shards := []tableset.DDLShard{{Name: "shard1", Pool: db.Pool}}
	var in *pgerr.InputError
	if _, err := Parse(ctx, "ALTER TABLE users ADD COLUMN x int", spec, nil); !errors.As(err, &in) || !strings.Contains(err.Error(), "keyspace default has no shard") {
		t.Errorf("no shard: %v", err)
	}
	if _, err := Parse(ctx, "ALTER TABLE users DROP COLUMN id", spec, shards); !errors.As(err, &in) {
		t.Errorf("a dropped key column: %v, want a *pgerr.InputError", err)
	}
	stmts, err := Parse(ctx, "ALTER TABLE users ADD COLUMN nickname text", spec, shards)
	if err != nil || len(stmts) != 1 {
		t.Fatalf("an added column: %v, %v", stmts, err)
	}
}
