package activities

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

// TestFreshWorkerComparesTheRecordedTarget: the target's identity goes with
// the move (MoveRef.Target), so a worker that never saw the move compares
// the target with it: a target that answers with another system identifier
// than the one recorded (a database restored behind the same address while
// no worker watched) stops the copy before it writes, where a fresh worker
// used to take whatever it found as its record and copy on. A record that
// matches lets the slice run and reports the target as it found it.
func TestFreshWorkerComparesTheRecordedTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, name text)`
	src.Exec(t, ddl+`; INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 200) g`)
	dst.Exec(t, ddl)
	if err := backfill.EnsureSchema(ctx, dst.Pool); err != nil {
		t.Fatal(err)
	}
	var sysid string
	var tli int32
	if err := dst.Pool.QueryRow(ctx, `SELECT system_identifier::text, ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int FROM pg_control_system()`).Scan(&sysid, &tli); err != nil {
		t.Fatal(err)
	}
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	moveID := fmt.Sprintf("acttgt%d_m1", time.Now().UnixNano()%1_000_000)
	ref := workflows.MoveRef{MigrationID: "acttgt", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}}, Tables: spec}
	fresh := func() *Activities {
		a := New(&Resolver{Shards: map[string]string{"src": src.DSN, "dst": dst.DSN}}, nil, nil)
		t.Cleanup(a.Close)
		return a
	}

	ref.Target = &workflows.SourceIdentity{SystemID: "1" + sysid, Timeline: tli}
	_, err := fresh().CopySlice(ctx, workflows.CopySliceInput{Move: ref, ChunkRows: 100, MaxTime: 5 * time.Second})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeFailedOver {
		t.Fatalf("copy slice of a fresh worker against another system than the recorded one: %v, want %s", err, workflows.ErrTypeFailedOver)
	}
	t.Logf("refused: %v", appErr.Message())
	if n := dst.QueryInt64(t, `SELECT count(*) FROM users`); n != 0 {
		t.Fatalf("%d rows copied to the replaced target", n)
	}

	ref.Target = &workflows.SourceIdentity{SystemID: sysid, Timeline: tli}
	p, err := fresh().CopySlice(ctx, workflows.CopySliceInput{Move: ref, ChunkRows: 100, MaxTime: 5 * time.Second})
	if err != nil {
		t.Fatalf("copy slice against the recorded target: %v", err)
	}
	if p.Failover != "" || p.Target == nil || p.Target.SystemID != sysid || p.Target.Timeline != tli {
		t.Fatalf("slice reports failover %q, target %+v; want none and the target as recorded", p.Failover, p.Target)
	}
}
