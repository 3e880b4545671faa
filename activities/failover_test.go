package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/join"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// TestSourceFailoverSeenByEveryActivity: the source identity recorded when
// the move's slot is created goes with the move, so that after the source's
// synchronous standby is promoted mid-copy, the next copy slice stops with
// ErrTypeFailedOver instead of copying on from the promoted server (which
// has no slot) and finishing, and a fresh worker's stream reports the
// failover instead of "nothing to stream".
func TestSourceFailoverSeenByEveryActivity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg := pgtest.PG(t)
	primary := pgtest.OwnServer(t, "actfail")
	sb, both := pgtest.SyncStandby(t, primary)
	srcPool, err := pgxpool.New(ctx, primary.DSN("postgres", false))
	if err != nil {
		t.Fatal(err)
	}
	dst := pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, name text)`
	if _, err := srcPool.Exec(ctx, ddl+`; INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 4000) g; ANALYZE users`); err != nil {
		t.Fatal(err)
	}
	dst.Exec(t, ddl)
	if err := backfill.EnsureSchema(ctx, dst.Pool); err != nil {
		t.Fatal(err)
	}

	// The control database, for the cutover at the end: src owns the
	// moving range in topology v1, the migration's plan moves it to dst.
	ctl := pgtest.NewDB(t, 0)
	if err := topology.Migrate(ctx, ctl.Pool); err != nil {
		t.Fatal(err)
	}
	store := topology.NewStore(ctl.Pool)
	for _, n := range []string{"src", "dst"} {
		if err := store.RegisterShard(ctx, topology.Shard{Name: n, Conn: topology.ConnRef{Host: "127.0.0.1", Port: 1, Database: n, User: "postgres"}, State: topology.ShardActive}); err != nil {
			t.Fatal(err)
		}
	}
	v1, err := topology.New(ring.MustNew([]ring.VNode{{Token: -6e18, Shard: "src"}, {Token: -2e18, Shard: "dst"}, {Token: 2e18, Shard: "src"}, {Token: 6e18, Shard: "dst"}}), nil, "initial")
	if err != nil {
		t.Fatal(err)
	}
	if v1, err = store.Publish(ctx, 0, v1); err != nil {
		t.Fatal(err)
	}

	newActs := func() *Activities {
		a := New(&Resolver{Control: ctl.DSN, Shards: map[string]string{"src": both, "dst": dst.DSN}}, nil, nil)
		t.Cleanup(a.Close)
		return a
	}
	a := newActs()
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken / 2}}
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	moveID := fmt.Sprintf("actfail%d_m1", time.Now().UnixNano()%1_000_000)
	moving := ring.Range{Lo: -1e18, Hi: 1.5e18}
	req := workflows.MigrationRequest{ID: "actfail", Kind: workflows.KindMove, Range: &moving, To: "dst", Tables: spec}
	ref := workflows.MoveRef{MigrationID: "actfail", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: ranges}, Tables: spec,
		FromVersion: v1.Version, Request: &req}
	names, err := cdc.NamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	set, err := tableset.Introspect(ctx, srcPool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	// The source's fence triggers, as JOINING installs them (nothing fenced
	// yet): a cutover that fenced would leave its ranges in reshard.fence.
	if err := fence.InstallTriggers(ctx, srcPool, set, false); err != nil {
		t.Fatal(err)
	}
	if err := cdc.CreatePublication(ctx, srcPool, names.Publication, set, ranges); err != nil {
		t.Fatal(err)
	}
	// JOINING: the slot, and the server it is on.
	l0, id, err := join.Slot(ctx, a.replication("src"), "src", names.Slot)
	if err != nil {
		t.Fatal(err)
	}
	if id.SystemID == "" || id.Timeline != 1 {
		t.Fatalf("identity at the slot's creation: %+v, want a system id on timeline 1", id)
	}
	ref.Source = &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline, L0: l0.String()}

	// A first slice copies part of the range.
	slice := workflows.CopySliceInput{Move: ref, ChunkRows: 100, Throttle: workflows.Throttle{RowsPerSec: 400}, MaxTime: 800 * time.Millisecond}
	p, err := a.CopySlice(ctx, slice)
	if err != nil {
		t.Fatal(err)
	}
	if p.Done || p.Rows == 0 {
		t.Fatalf("first slice: %+v, want part of the range copied", p)
	}
	// Written after the slot, never streamed; then the primary dies and
	// its synchronous standby is promoted.
	if _, err := srcPool.Exec(ctx, `INSERT INTO users SELECT g, 'late' FROM generate_series(4001, 4500) g`); err != nil {
		t.Fatal(err)
	}
	srcPool.Close()
	if err := pg.Kill(ctx, primary); err != nil {
		t.Fatal(err)
	}
	if err := pg.Promote(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := devenv.ClearSyncStandby(ctx, sb); err != nil {
		t.Fatal(err)
	}

	failedOver := func(what string, err error) {
		t.Helper()
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeFailedOver || !appErr.NonRetryable() {
			t.Fatalf("%s: %v, want a non-retryable %s", what, err, workflows.ErrTypeFailedOver)
		}
		if !strings.Contains(err.Error(), "timeline 1 → 2") || !strings.Contains(err.Error(), "source src failed over") {
			t.Fatalf("%s: %v, want the source and its timeline change named", what, err)
		}
		t.Logf("%s: %v", what, err)
	}
	copied := dst.QueryInt64(t, `SELECT count(*) FROM users`)
	// Attempts as Temporal makes them: a retryable error (a pooled
	// connection to the dead primary) is tried again.
	for attempt := 1; ; attempt++ {
		_, err = a.CopySlice(ctx, slice)
		var appErr *temporal.ApplicationError
		if attempt == 10 || !errors.As(err, &appErr) || appErr.NonRetryable() {
			break
		}
		t.Logf("copy slice attempt %d: %v", attempt, err)
	}
	failedOver("copy slice on the promoted source", err)
	if got := dst.QueryInt64(t, `SELECT count(*) FROM users`); got != copied {
		t.Fatalf("the copy went on on the promoted source: %d rows on the target, were %d", got, copied)
	}
	// The copy slice's finding is counted, once: the next slice (another
	// move out of the same source, say) and this worker's stream find the
	// same failover.
	counted := func(phase string) float64 {
		return counterValue(a.metrics.failovers.vec.WithLabelValues("src", phase))
	}
	if n := counted(string(workflows.PhaseSnapshotCopy)); n != 1 {
		t.Fatalf("reshard_failovers_total{shard=src,phase=SNAPSHOT_COPY} = %v after the slice found the failover, want 1", n)
	}
	_, err = a.CopySlice(ctx, slice)
	failedOver("second slice", err)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	// Streams as the workflow starts them (MoveRef.Stream names each), until
	// one stops on the failover: one may first meet a pooled connection
	// to the dead primary.
	streamed := ref
	for n := 1; ; n++ {
		streamed.Stream = fmt.Sprintf("actfail-run#%d", n)
		err := a.RunCDC(sctx, workflows.CDCInput{Move: streamed, L0: l0.String(), Phase: workflows.PhaseCDCCatchUp})
		if err == nil {
			t.Fatal("the stream ran on the promoted source")
		}
		var appErr *temporal.ApplicationError
		if n == 10 || !errors.As(err, &appErr) || appErr.NonRetryable() {
			break
		}
		t.Logf("stream %d: %v", n, err)
	}
	// The cutover attempt next to that stream (its session's) finds the
	// failover before it fences anything: the source unfenced, no hold
	// taken, no step journaled, the topology as it was. The workflow then
	// recovers the move (versionCutoverFailoverRecovers).
	_, err = a.Cutover(ctx, workflows.CutoverInput{Move: streamed, Budget: time.Second})
	failedOver("cutover next to the ended stream", err)
	promoted, err := pgxpool.New(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	defer promoted.Close()
	if fenced, _, err := fence.Fenced(ctx, promoted, set.Tables[0]); err != nil || len(fenced) != 0 {
		t.Fatalf("fences on the promoted source after the cutover: %v (%v), want none", fenced, err)
	}
	if holds, err := (fence.Control{Pool: ctl.Pool, Store: store}).Holds(ctx, "src"); err != nil || len(holds) != 0 {
		t.Fatalf("holds on src after the cutover: %v (%v), want none", holds, err)
	}
	if last, err := (cutover.PGJournal{Pool: ctl.Pool, Move: moveID}).Last(ctx); err != nil || last != "" {
		t.Fatalf("the cutover journaled %q (%v), want no step", last, err)
	}
	if cur, err := store.Current(ctx); err != nil || cur.Version != v1.Version {
		t.Fatalf("topology after the cutover: v%d (%v), want v%d", cur.Version, err, v1.Version)
	}
	if n, m := counted(string(workflows.PhaseSnapshotCopy)), counted(string(workflows.PhaseCDCCatchUp)); n != 1 || m != 0 {
		t.Fatalf("reshard_failovers_total for src: SNAPSHOT_COPY %v, CDC_CATCH_UP %v after a second slice and a stream found the same failover, want 1 and 0", n, m)
	}

	// A fresh worker (nothing in memory) starts the stream.
	cdcIn := workflows.CDCInput{Move: ref, L0: l0.String()}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	failedOver("a fresh worker's stream", newActs().RunCDC(rctx, cdcIn))
	// Without the record (a move joined before it was kept) the stream
	// cannot tell a failover from a dropped slot: what main said.
	cdcIn.Move.Source = nil
	err = newActs().RunCDC(rctx, cdcIn)
	if err == nil || !strings.Contains(err.Error(), "nothing to stream") {
		t.Fatalf("stream without the record: %v, want the dropped-slot message", err)
	}
}

// TestSourceFailoverRecoversNothingLost: the recovery's activities against
// real servers. A move's stream applies writes, stops; more writes commit on
// the primary and its synchronous standby but are never streamed; the
// primary dies and the standby is promoted. RecoverSource creates the slot
// on the new primary, Repair rewrites only what differs, a fresh worker's
// stream from the new slot applies what follows, and the target ends equal
// to the source in the moving ranges.
func TestSourceFailoverRecoversNothingLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := pgtest.PG(t)
	primary := pgtest.OwnServer(t, "actrec")
	sb, both := pgtest.SyncStandby(t, primary)
	srcPool, err := pgxpool.New(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srcPool.Close)
	exec := func(sql string) {
		t.Helper()
		if _, err := srcPool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	dst := pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, name text)`
	exec(ddl + `; INSERT INTO users SELECT g, 'n' || g FROM generate_series(1, 20000) g; ANALYZE users`)
	dst.Exec(t, ddl)
	if err := backfill.EnsureSchema(ctx, dst.Pool); err != nil {
		t.Fatal(err)
	}
	newActs := func() *Activities {
		a := New(&Resolver{Shards: map[string]string{"src": both, "dst": dst.DSN}}, nil, nil)
		t.Cleanup(a.Close)
		return a
	}
	a := newActs()
	ranges := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken / 2}}
	inRange := ring.Predicate("hashint8extended(id, 0)", ranges)
	spec := keyspace.Spec{Name: "users", Tables: []keyspace.TableSpec{{Table: "users", KeyColumn: "id"}}}
	moveID := fmt.Sprintf("actrec%d_m1", time.Now().UnixNano()%1_000_000)
	ref := workflows.MoveRef{MigrationID: "actrec", Spec: workflows.MoveSpec{ID: moveID, Source: "src", Target: "dst", Ranges: ranges}, Tables: spec}
	names, err := cdc.NamesFor(moveID)
	if err != nil {
		t.Fatal(err)
	}
	set, err := tableset.Introspect(ctx, srcPool, spec, "source")
	if err != nil {
		t.Fatal(err)
	}
	if err := cdc.CreatePublication(ctx, srcPool, names.Publication, set, ranges); err != nil {
		t.Fatal(err)
	}
	l0, id, err := join.Slot(ctx, a.replication("src"), "src", names.Slot)
	if err != nil {
		t.Fatal(err)
	}
	ref.Source = &workflows.SourceIdentity{SystemID: id.SystemID, Timeline: id.Timeline, L0: l0.String()}
	for {
		p, err := a.CopySlice(ctx, workflows.CopySliceInput{Move: ref, ChunkRows: 2000, MaxTime: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if p.Done {
			break
		}
	}
	countTarget := func(where string) int64 { return dst.QueryInt64(t, `SELECT count(*) FROM users WHERE `+where) }
	countSource := func(where string) int64 {
		t.Helper()
		var n int64
		if err := srcPool.QueryRow(ctx, `SELECT count(*) FROM users WHERE `+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stream := func(a *Activities, in workflows.CDCInput, until func() bool) {
		t.Helper()
		sctx, scancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.RunCDC(sctx, in) }()
		deadline := time.Now().Add(60 * time.Second)
		for !until() {
			if time.Now().After(deadline) {
				scancel()
				t.Fatalf("stream did not catch up: %v", <-done)
			}
			time.Sleep(200 * time.Millisecond)
		}
		scancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("stream: %v", err)
		}
	}
	// A writer upserts ids 30001..30400 through the multi-host DSN from
	// here to the end, retrying through the failover, and records what was
	// acknowledged.
	wpool, err := pgxpool.New(ctx, both)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wpool.Close)
	acked := map[int64]int{} // id → the last acknowledged seq (name w<seq>)
	var writes, failed int
	wctx, stopWriter := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for seq := 1; wctx.Err() == nil; seq++ {
			id, name := int64(30001+seq%400), fmt.Sprintf("w%d", seq)
			if _, err := wpool.Exec(wctx, `INSERT INTO users VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name`, id, name); err != nil {
				failed++
				time.Sleep(50 * time.Millisecond)
				continue
			}
			acked[id] = seq
			writes++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// CDC_CATCH_UP: the stream applies these.
	exec(`UPDATE users SET name = 'streamed' WHERE id % 50 = 0 AND id <= 30000`)
	want := countSource(`name = 'streamed' AND ` + inRange)
	stream(a, workflows.CDCInput{Move: ref, L0: l0.String()}, func() bool { return countTarget(`name = 'streamed'`) == want })

	// The window: committed (synchronously on the standby too), never
	// streamed from the old slot.
	exec(`UPDATE users SET name = 'window' WHERE id % 97 = 1 AND id <= 30000`)
	exec(`DELETE FROM users WHERE id % 89 = 2 AND id <= 30000`)
	exec(`INSERT INTO users SELECT g, 'window-new' FROM generate_series(20001, 20060) g`)
	windowRows := countSource(`((id % 97 = 1 AND id <= 20000) OR id BETWEEN 20001 AND 30000) AND ` + inRange)
	deletedInRange := dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id % 89 = 2 AND id <= 30000`) // the target's copies of the deleted rows
	if err := pg.Kill(ctx, primary); err != nil {
		t.Fatal(err)
	}
	if err := pg.Promote(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := devenv.ClearSyncStandby(ctx, sb); err != nil {
		t.Fatal(err)
	}
	srcPool.Close() // its connections went with the old primary
	if srcPool, err = pgxpool.New(ctx, both); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srcPool.Close)

	t0 := time.Now()
	rr, err := newActs().RecoverSource(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if rr.Source == nil || rr.Source.Timeline != 2 || rr.Source.SystemID != id.SystemID {
		t.Fatalf("recovered: %+v, want the same system on timeline 2", rr.Source)
	}
	ref.Source = rr.Source
	// After the new slot: the stream's to apply, whatever the repair saw.
	exec(`UPDATE users SET name = 'after' WHERE id % 101 = 3 AND id <= 30000`)
	rep, err := newActs().Repair(ctx, workflows.RepairInput{Move: ref})
	if err != nil {
		t.Fatal(err)
	}
	afterRows := countSource(`name = 'after' AND ` + inRange)
	writerRows := countSource(`id > 30000 AND ` + inRange)
	t.Logf("recovered in %s: repair %d of %d chunks, %d rows copied, %d deleted; changed in the moving ranges: %d in the window (+%d deleted), %d after the new slot, %d by the writer",
		time.Since(t0).Round(time.Millisecond), rep.Repaired, rep.Chunks, rep.RowsCopied, rep.RowsDeleted, windowRows, deletedInRange, afterRows, writerRows)
	if rep.RowsCopied < windowRows || rep.RowsCopied > windowRows+afterRows+writerRows {
		t.Errorf("repair copied %d rows, want the %d of the window (and at most the %d changed after the new slot and the %d the writer keeps changing)", rep.RowsCopied, windowRows, afterRows, writerRows)
	}
	if rep.Repaired == 0 || rep.Repaired > rep.Chunks {
		t.Errorf("repaired %d of %d chunks", rep.Repaired, rep.Chunks)
	}
	exec(`UPDATE users SET name = 'last' WHERE id % 103 = 4 AND id <= 30000`)
	time.Sleep(time.Second) // the writer's writes reach the stream while it runs too
	stopWriter()
	<-writerDone
	var vrep *verify.Report
	stream(newActs(), workflows.CDCInput{Move: ref, L0: rr.L0}, func() bool {
		vrep, err = verify.Run(ctx, srcPool, dst.Pool, verify.Options{Set: set, Ranges: ranges})
		return err == nil && vrep.OK()
	})
	t.Logf("writer: %d writes acknowledged, %d failed (through the failover)", writes, failed)
	// Every acknowledged write is on the source (the standby was
	// synchronous) and, in the moving ranges, on the target.
	// A write whose acknowledgement the failover cut off may be there too:
	// a later seq than the last acknowledged one is fine, an older one lost.
	for id, seq := range acked {
		var got string
		if err := srcPool.QueryRow(ctx, `SELECT name FROM users WHERE id = $1`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		var have int
		if _, err := fmt.Sscanf(got, "w%d", &have); err != nil || have < seq {
			t.Fatalf("acknowledged write %d=w%d: source has %q", id, seq, got)
		}
		if ring.ContainsAny(ranges, ring.TokenInt64(id)) {
			if n := dst.QueryInt64(t, `SELECT count(*) FROM users WHERE id = $1 AND name = $2`, id, got); n != 1 {
				t.Fatalf("acknowledged write %d=w%d (%s on the source) missing on the target", id, seq, got)
			}
		}
	}
	if writes == 0 {
		t.Fatal("the writer wrote nothing")
	}
	if n := countTarget(`NOT ` + inRange); n != 0 {
		t.Fatalf("%d rows outside the moving ranges on the target", n)
	}
}

// TestFailoverCountedOncePerTimelineChange: reshard_failovers_total counts
// a failover once, by the shard and the phase of its first finding,
// however many moves (streams, copy slices, verifies) find it; a later
// failover of the same shard, or one of another shard, counts again.
func TestFailoverCountedOncePerTimelineChange(t *testing.T) {
	a := New(&Resolver{}, nil, nil)
	tl := func(n int32) cdc.ServerIdentity {
		return cdc.ServerIdentity{SystemID: "7300000000000000001", Timeline: n}
	}
	lost := func(move string, was, now int32) error {
		return fmt.Errorf("copy move %s: %w", move, &cdc.FailedOverError{Source: "shard2", Slot: "reshard_" + move, Was: tl(was), Now: tl(now), SlotMissing: true})
	}
	counted := func(shard string, phase workflows.Phase) float64 {
		return counterValue(a.metrics.failovers.vec.WithLabelValues(shard, string(phase)))
	}
	// Four moves out of shard2, in three phases, find its promotion.
	a.sourceFailedOver(lost("m1", 1, 2), workflows.PhaseSnapshotCopy)
	a.sourceFailedOver(lost("m2", 1, 2), workflows.PhaseCDCCatchUp)
	a.sourceFailedOver(lost("m3", 1, 2), workflows.PhaseCDCCatchUp)
	a.sourceFailedOver(lost("m4", 1, 2), workflows.PhaseVerify)
	a.sourceFailedOver(lost("m1", 1, 2), workflows.PhaseSnapshotCopy) // its next slice
	a.sourceFailedOver(errors.New("connection refused"), workflows.PhaseVerify)
	a.sourceFailedOver(nil, workflows.PhaseVerify)
	if c, u, v := counted("shard2", workflows.PhaseSnapshotCopy), counted("shard2", workflows.PhaseCDCCatchUp), counted("shard2", workflows.PhaseVerify); c != 1 || u != 0 || v != 0 {
		t.Fatalf("one failover of shard2 found 5 times: SNAPSHOT_COPY %v, CDC_CATCH_UP %v, VERIFY %v; want 1, 0, 0", c, u, v)
	}
	// Its next failover (timeline 2 → 3) is another one.
	a.sourceFailedOver(lost("m2", 2, 3), workflows.PhaseCDCCatchUp)
	a.sourceFailedOver(lost("m3", 2, 3), workflows.PhaseCDCCatchUp)
	if u := counted("shard2", workflows.PhaseCDCCatchUp); u != 1 {
		t.Fatalf("shard2's second failover: CDC_CATCH_UP %v, want 1", u)
	}
	// A target's failover (shard5) is its own, found by two moves' streams
	// or copy slices through the same counter.
	if !a.metrics.failovers.count("shard5", string(workflows.PhaseSnapshotCopy), tl(1), tl(2)) ||
		a.metrics.failovers.count("shard5", string(workflows.PhaseCDCCatchUp), tl(1), tl(2)) {
		t.Fatal("shard5's failover: want the first finding counted and the second not")
	}
	ch := make(chan prometheus.Metric, 16)
	a.metrics.failovers.vec.Collect(ch)
	close(ch)
	var total float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		total += d.GetCounter().GetValue()
	}
	if total != 3 {
		t.Fatalf("%v failovers counted in all, want 3 (shard2 SNAPSHOT_COPY, shard2 CDC_CATCH_UP, shard5 SNAPSHOT_COPY)", total)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestPhaseActivityDoesNotWaitForAnEndedStream: a phase activity
// (catch-up's lag poll, verify, cutover) that works next to a stream that
// ended by itself in this worker returns at once, not after waiting
// streamWait for a stream only the workflow starts again: the source's
// failover as ErrTypeFailedOver (the workflow recovers the move), any
// other end as ErrTypeNoStream. A phase activity next to the stream the
// workflow started after it (not running yet) waits for it, and the new
// stream's start clears the record.
func TestPhaseActivityDoesNotWaitForAnEndedStream(t *testing.T) {
	a := New(&Resolver{}, nil, nil)
	ctx := context.Background()
	ref := func(stream string) workflows.MoveRef {
		return workflows.MoveRef{Spec: workflows.MoveSpec{ID: "m1"}, Stream: stream}
	}
	was := cdc.ServerIdentity{SystemID: "7300000000000000001", Timeline: 1}
	a.streamEnded("m1", "run1#1", nil, fmt.Errorf("stream of move m1: %w", &cdc.FailedOverError{Source: "shard2", Slot: "reshard_m1", Was: was, Now: cdc.ServerIdentity{SystemID: was.SystemID, Timeline: 2}, SlotMissing: true}))
	var appErr *temporal.ApplicationError
	start := time.Now()
	_, err := a.stream(ctx, ref("run1#1"), streamWait)
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeFailedOver || time.Since(start) > time.Second {
		t.Fatalf("next to the stream that ended on the failover: %v after %s, want %s at once", err, time.Since(start), workflows.ErrTypeFailedOver)
	}
	// The workflow recovered and started stream #2, not running yet.
	_, err = a.stream(ctx, ref("run1#2"), 300*time.Millisecond)
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeNoStream || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("next to the stream about to start: %v, want %s once it waited", err, workflows.ErrTypeNoStream)
	}
	var st *cdc.Stream // registered as runCDC does (the value is not used here)
	a.putStream("m1", st)
	a.dropStream("m1", st)
	if _, err := a.stream(ctx, ref("run1#1"), 200*time.Millisecond); !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeNoStream {
		t.Fatalf("after the next stream started: %v, want %s once it waited (the record cleared)", err, workflows.ErrTypeNoStream)
	}
	// A stream that lost its connection: no failover, the workflow
	// restarts it at once.
	a.streamEnded("m1", "run1#2", nil, errors.New("receive from slot reshard_m1: connection lost: unexpected EOF"))
	start = time.Now()
	if _, err := a.stream(ctx, ref("run1#2"), streamWait); !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeNoStream || time.Since(start) > time.Second ||
		!strings.Contains(err.Error(), "connection lost") {
		t.Fatalf("next to the stream that lost its connection: %v after %s, want %s at once, saying why", err, time.Since(start), workflows.ErrTypeNoStream)
	}
	// A workflow that names no stream (its history began before) waits.
	if _, err := a.stream(ctx, ref(""), 100*time.Millisecond); !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeNoStream {
		t.Fatalf("unnamed: %v, want %s once it waited", err, workflows.ErrTypeNoStream)
	}
}
