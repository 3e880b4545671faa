package cdc

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/testkit/pgtest"
)

// The applier commits synchronously whatever the target's default: what it
// acknowledges to the source must survive a crash of the target.
func TestApplierCommitsSynchronously(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	db.Exec(t, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` SET synchronous_commit = off`)
	s := &Stream{}
	r := &runner{s: s, o: &Options{TargetDSN: db.DSN, Origin: "reshard_t_durable"}}
	if err := r.openTarget(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.tg.conn.Close(ctx)
	var v string
	if err := r.tg.conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != "on" {
		t.Fatalf("the applier's session runs with synchronous_commit = %s", v)
	}
}
