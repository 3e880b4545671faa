package activities

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/workflows"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// A copy slice with adaptive limits runs under the adaptive throttle: the
// first measures the baselines and returns them with its rate; the next
// resumes from them (not measured again) at the rate the last one left.
func TestCopySliceAdaptive(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `CREATE TABLE kv (k bigint PRIMARY KEY, v text)`)
	}
	src.Exec(t, `INSERT INTO kv SELECT g, md5(g::text) FROM generate_series(1, 3000) g`)
	if err := backfill.EnsureSchema(context.Background(), dst.Pool); err != nil { // JOINING's
		t.Fatal(err)
	}
	a := New(&Resolver{Shards: map[string]string{"a": src.DSN, "b": dst.DSN}}, nil, nil)
	defer a.Close()
	move := workflows.MoveRef{MigrationID: "m", Tables: keyspace.Spec{Name: "kv", Tables: []keyspace.TableSpec{{Table: "kv", KeyColumn: "k"}}},
		Spec: workflows.MoveSpec{ID: "m_adapt", Source: "a", Target: "b", Ranges: []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, EstRows: 3000}}
	in := workflows.CopySliceInput{Move: move, ChunkRows: 500, MaxTime: 2 * time.Second,
		Throttle: workflows.Throttle{Adaptive: &workflows.AdaptiveThrottle{MaxLatencyIncrease: 1000}}}
	p, err := a.copySlice(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if p.Adaptive == nil || p.Adaptive.SourceBaseline <= 0 || p.Adaptive.TargetBaseline <= 0 || p.Adaptive.BaselineAt.IsZero() || p.Adaptive.RowsPerSec <= 0 {
		t.Fatalf("first slice's adaptive state: %+v", p.Adaptive)
	}
	if p.Done || p.Rows == 0 || p.Rows >= 3000 {
		t.Fatalf("first slice (its baseline, then slow start from 1000 rows/s, 2 s): %+v", p)
	}
	// The next slice carries on from it.
	in.Adaptive = &workflows.AdaptiveStatus{RowsPerSec: 5000, SourceBaseline: 7 * time.Millisecond, TargetBaseline: 8 * time.Millisecond, BaselineAt: time.Now()}
	in.MaxTime = 10 * time.Second
	p2, err := a.copySlice(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !p2.Done || p2.Rows != 3000 {
		t.Fatalf("second slice: %+v", p2)
	}
	if p2.Adaptive == nil || p2.Adaptive.SourceBaseline != 7*time.Millisecond || p2.Adaptive.TargetBaseline != 8*time.Millisecond {
		t.Fatalf("second slice did not resume from the first's state: %+v", p2.Adaptive)
	}
	// Without limits there is no adaptive state.
	if ad := a.adaptive("m", nil, nil, true, nil, nil, nil, ""); ad != nil {
		t.Fatal("an adaptive throttle without limits")
	}
}
