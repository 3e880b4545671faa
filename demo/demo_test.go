package demo

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestLoadPutsEveryKeyOnItsOwner(t *testing.T) {
	ctx := context.Background()
	a, b := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	pools := map[string]*pgxpool.Pool{"a": a.Pool, "b": b.Pool}
	if err := CreateSchema(ctx, pools); err != nil {
		t.Fatal(err)
	}
	if err := CreateSchema(ctx, pools); err != nil {
		t.Fatalf("schema twice: %v", err)
	}
	r, err := ring.Build([]ring.Shard{{Name: "a"}, {Name: "b"}}, ring.Options{VNodes: 8})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := Load(ctx, pools, r, LoadOptions{Users: 2000, OrdersPerUser: 2, PayloadBytes: 3000})
	if err != nil {
		t.Fatal(err)
	}
	if rows != 2000*3 {
		t.Fatalf("loaded %d rows, want %d", rows, 2000*3)
	}
	p, err := CheckPlacement(ctx, pools, r)
	if err != nil || !p.OK() {
		t.Fatalf("placement %+v, %v", p, err)
	}
	if p.Rows["a"] == 0 || p.Rows["b"] == 0 {
		t.Fatalf("one shard got nothing: %+v", p.Rows)
	}
	// A row put on the wrong shard is found.
	var foreign int64
	for k := int64(1); ; k++ {
		if r.OwnerInt64(k) == "b" {
			foreign = k
			break
		}
	}
	a.Exec(t, "INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING", foreign)
	if p, _ := CheckPlacement(ctx, pools, r); p.OK() || p.Misplaced["a"] != 1 {
		t.Fatalf("misplaced row not found: %+v", p)
	}
	// The payload is TOASTed (stored out of line).
	if n := a.QueryInt64(t, "SELECT count(*) FROM users WHERE pg_column_size(payload) >= 3000"); n == 0 {
		t.Fatal("no TOASTed payloads")
	}
}
