package activities

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// TestActivityOfAnotherClusterIsRefused: two clusters, each with its own
// control database, whose workers share a task queue. Every activity of a
// migration of cluster A, run by a worker of cluster B (whose shards have
// the same names), is refused with a non-retryable ErrTypeWrongCluster
// naming both clusters and the fix, and leaves B's control database and
// shards as they were. A request of B's own cluster passes the guard, and
// one from before cluster ids passes only where its plan is stored.
func TestActivityOfAnotherClusterIsRefused(t *testing.T) {
	ctx := movetest.Ctx(t)
	const migration = "guardmig"
	envB := movetest.New(t, topology.MoveID(migration, 1), 20)
	ctlA := pgtest.NewDB(t, 0)
	if err := topology.Migrate(ctx, ctlA.Pool); err != nil {
		t.Fatal(err)
	}
	idA, err := topology.NewStore(ctlA.Pool).ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := envB.Store.ClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if idA == idB || !strings.HasPrefix(idA, "cluster-") {
		t.Fatalf("cluster ids %q and %q: want two distinct ids made by the schema", idA, idB)
	}
	again, err := envB.Store.ClusterID(ctx)
	if err != nil || again != idB {
		t.Fatalf("cluster id read again: %q, %v; want %q", again, err, idB)
	}

	b := New(&Resolver{Control: envB.Ctl.DSN, Shards: map[string]string{"a": envB.DBs["a"].DSN, "b": envB.DBs["b"].DSN}}, nil, nil)
	t.Cleanup(b.Close)

	spec := keyspace.Spec{Name: "app", Tables: []keyspace.TableSpec{{Table: "kv", KeyColumn: "k"}, {Table: "items", KeyColumn: "k"}}}
	rng := movetest.Moving
	req := workflows.MigrationRequest{ID: migration, Cluster: idA, Kind: workflows.KindMove, Range: &rng, To: "b", Tables: spec}
	mv := workflows.MoveSpec{ID: envB.Move.ID, Source: "a", Target: "b", Ranges: envB.Move.Ranges}
	ref := workflows.MoveRef{MigrationID: migration, Spec: mv, Tables: spec, FromVersion: envB.Initial.Version, Request: &req}
	inputs := map[reflect.Type]any{}
	for _, in := range []any{
		req,
		workflows.PublishInput{Request: req, FromVersion: envB.Initial.Version, Moves: []workflows.MoveSpec{mv}},
		ref,
		workflows.CopySliceInput{Move: ref, ChunkRows: 100, MaxTime: time.Second},
		workflows.CDCInput{Move: ref, L0: "0/0"},
		workflows.VerifyInput{Move: ref, RunID: "guardrun"},
		workflows.CutoverInput{Move: ref, Budget: time.Second},
		workflows.EndInput{Move: ref},
		workflows.RepairInput{Move: ref},
	} {
		inputs[reflect.TypeOf(in)] = in
	}

	before := clusterState(t, envB)
	n := 0
	b.Register(func(fn any, name string) {
		n++
		f := reflect.ValueOf(fn)
		in, ok := inputs[f.Type().In(1)]
		if !ok {
			t.Errorf("activity %s takes %s, which this test has no input of cluster A for", name, f.Type().In(1))
			return
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out := f.Call([]reflect.Value{reflect.ValueOf(actx), reflect.ValueOf(in)})
		err, _ := out[len(out)-1].Interface().(error)
		wantWrongCluster(t, name, err, idA, idB)
	})
	if n < 18 {
		t.Fatalf("%d activities registered, want every one (18)", n)
	}
	if after := clusterState(t, envB); after != before {
		t.Errorf("cluster B changed under activities of cluster A:\nbefore %s\nafter  %s", before, after)
	}

	// B's own request passes.
	own := req
	own.Cluster = idB
	ownRef := ref
	ownRef.Request = &own
	if err := b.ownCluster(ctx, ownRef); err != nil {
		t.Errorf("a move of B's own cluster: %v, want it to run", err)
	}
	// A request from before cluster ids: refused while B holds no plan of
	// its migration, Plan included; accepted once B's control database has
	// the plan (an in-flight migration of this cluster).
	legacy := req
	legacy.Cluster = ""
	legacyRef := ref
	legacyRef.Request = &legacy
	for _, in := range []owned{legacy, legacyRef, workflows.CopySliceInput{Move: workflows.MoveRef{MigrationID: migration, Spec: mv}}} {
		err := b.ownCluster(ctx, in)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeWrongCluster || !appErr.NonRetryable() ||
			!strings.Contains(appErr.Message(), "names no cluster") || !strings.Contains(appErr.Message(), idB) {
			t.Errorf("%T without a cluster id, no plan stored: %v; want a non-retryable %s naming cluster %s", in, err, workflows.ErrTypeWrongCluster, idB)
		}
	}
	if err := envB.Store.SavePlan(ctx, topology.Plan{MigrationID: migration, FromVersion: envB.Initial.Version, Before: envB.Old, After: envB.New,
		Moves: []ring.Move{{Range: envB.Move.Ranges[0], From: "a", To: "b"}}}); err != nil {
		t.Fatal(err)
	}
	for _, in := range []owned{legacy, legacyRef, workflows.EndInput{Move: workflows.MoveRef{MigrationID: migration, Spec: mv}}} {
		if err := b.ownCluster(ctx, in); err != nil {
			t.Errorf("%T without a cluster id, its plan stored in B: %v; want it to run", in, err)
		}
	}
}

// wantWrongCluster fails unless err is the guard's refusal of a request of
// cluster a on a worker of cluster b.
func wantWrongCluster(t *testing.T, name string, err error, a, b string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeWrongCluster {
		t.Errorf("activity %s of cluster %s on a worker of cluster %s: %v; want a %s error", name, a, b, err, workflows.ErrTypeWrongCluster)
		return
	}
	msg := appErr.Message()
	if !appErr.NonRetryable() || !strings.Contains(msg, a) || !strings.Contains(msg, b) || !strings.Contains(msg, "temporal.namespace") {
		t.Errorf("activity %s: %q (non-retryable %v); want a non-retryable error naming both clusters and the fix", name, msg, appErr.NonRetryable())
	}
}

// clusterState is what an activity could change in a cluster: the rows of
// every table of its control database's schema reshard, and on each shard
// its rows, slots, publications, the move's replication origin, triggers,
// functions and relations.
func clusterState(t *testing.T, e *movetest.Env) string {
	t.Helper()
	ctx := movetest.Ctx(t)
	var b strings.Builder
	rows, err := e.Ctl.Pool.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = 'reshard'::regnamespace AND relkind = 'r' ORDER BY relname`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb == "workers" { // workers report themselves; none runs here
			continue
		}
		var sum string
		q := fmt.Sprintf(`SELECT count(*) || ':' || coalesce(sum(hashtext(x::text)), 0) FROM %s x`, pgx.Identifier{"reshard", tb}.Sanitize())
		if err := e.Ctl.Pool.QueryRow(ctx, q).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "control %s %s; ", tb, sum)
	}
	names, err := cdc.NamesFor(e.Move.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, shard := range []string{"a", "b"} {
		var s string
		err := e.DBs[shard].Pool.QueryRow(ctx, `SELECT concat_ws(' ',
	(SELECT count(*) || ':' || coalesce(sum(hashtext(x::text)), 0) FROM kv x),
	(SELECT count(*) || ':' || coalesce(sum(hashtext(x::text)), 0) FROM items x),
	(SELECT count(*) FROM pg_replication_slots WHERE database = current_database()),
	(SELECT count(*) FROM pg_publication),
	(SELECT count(*) FROM pg_replication_origin WHERE roname = $1),
	(SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal),
	(SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')),
	(SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')))`,
			names.Origin).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "shard %s %s; ", shard, s)
	}
	return b.String()
}
