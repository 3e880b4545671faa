package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/temporal"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/workflows"
)

// TestClassify pins the class of every error type classify knows: a
// non-retryable application error of a type the workflow acts on, a
// retryable one, or the error passed on unchanged (Temporal retries it).
// Any one case changing class fails it.
func TestClassify(t *testing.T) {
	const unchanged = "" // passed on as it came
	wrong := temporal.NewNonRetryableApplicationError("cluster B", workflows.ErrTypeWrongCluster, nil)
	rls := &pgconn.PgError{Code: "42501", Message: `new row violates row-level security policy for table "users"`}
	cases := []struct {
		name      string
		err       error
		retryable bool
		typ       string
	}{
		{"bad input", badInput("shard %q unknown", "x"), false, workflows.ErrTypeBadInput},
		{"not a standby of the source (cdc)", fmt.Errorf("recover: %w", &cdc.NotStandbyOfError{Source: "shard2"}), false, workflows.ErrTypeBadInput},
		{"standby not in recovery (backfill)", fmt.Errorf("copy: %w", &backfill.NotStandbyError{Name: "shard2 standby"}), false, workflows.ErrTypeBadInput},
		{"preflight problem", fmt.Errorf("preflight: %w", &tableset.Problem{Check: "table", Shard: "source shard1", Problem: "no table", Fix: "create it"}), false, workflows.ErrTypePreflight},
		{"copy collision", fmt.Errorf("copy: %w", &backfill.CollisionError{Table: "users", Key: "id=1"}), false, workflows.ErrTypeCollision},
		{"cdc collision", &cdc.CollisionError{Table: "public.users", Key: "id=1"}, false, workflows.ErrTypeCollision},
		{"unique constraint", fmt.Errorf("apply: %w", pgerr.Unique(&pgconn.PgError{Code: "23505", ConstraintName: "users_email_key", TableName: "users"})), false, workflows.ErrTypeCollision},
		{"trigger enabled after PLAN", fmt.Errorf("move m1: %w", &tableset.FiringError{Problems: []*tableset.Problem{{Check: tableset.CheckReplicaTriggers, Shard: "shard2", Problem: "trigger audit is ENABLE ALWAYS", Fix: "ENABLE TRIGGER audit"}}}), false, workflows.ErrTypeFiringTrigger},
		{"schema change", &cdc.SchemaChangeError{Table: "public.users", OnlySource: []string{"x"}}, false, workflows.ErrTypeSchemaChange},
		{"source failed over", fmt.Errorf("stream: %w", &cdc.FailedOverError{Source: "shard2", SlotMissing: true}), false, workflows.ErrTypeFailedOver},
		{"target replaced", &cdc.TargetReplacedError{Target: "shard5"}, false, workflows.ErrTypeFailedOver},
		{"failed over (sentinel)", fmt.Errorf("x: %w", cdc.ErrFailedOver), false, workflows.ErrTypeFailedOver},
		{"row security", fmt.Errorf("copy: %w", rls), false, workflows.ErrTypeBadInput},
		{"privilege", &pgconn.PgError{Code: "42501", Message: "permission denied for table users"}, false, workflows.ErrTypeBadInput},
		{"undefined column", fmt.Errorf("copy: %w", &pgconn.PgError{Code: "42703"}), false, workflows.ErrTypeBadInput},
		{"invalid binary representation", &pgconn.PgError{Code: "22P03"}, false, workflows.ErrTypeBadInput},
		{"not null violation", &pgconn.PgError{Code: "23502"}, false, workflows.ErrTypeBadInput},
		{"unique violation", &pgconn.PgError{Code: "23505", ConstraintName: "users_pkey"}, false, workflows.ErrTypeBadInput},
		{"connection lost", &cdc.ConnError{Op: "receive", Err: io.ErrUnexpectedEOF}, true, "Retryable"},
		{"unexpected EOF", fmt.Errorf("copy: %w", io.ErrUnexpectedEOF), true, "Retryable"},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true, "Retryable"},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true, "Retryable"},
		{"serialization failure", &pgconn.PgError{Code: "40001"}, true, "Retryable"},
		{"deadlock", &pgconn.PgError{Code: "40P01"}, true, "Retryable"},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true, "Retryable"},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true, "Retryable"},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true, "Retryable"},
		{"slot in use", &pgconn.PgError{Code: "55006"}, true, "Retryable"},
		{"copy met a schema change", fmt.Errorf("copy: %w", &backfill.SchemaMovedError{Err: &pgconn.PgError{Code: "42703"}}), true, "Retryable"},
		{"standby behind the slot", fmt.Errorf("copy: %w", &backfill.ReplayLag{Name: "shard2 standby"}), true, "Retryable"},
		{"a column on one side only", fmt.Errorf("copy: %w", &tableset.ColumnWaitError{Table: tableset.Table{Schema: "public", Name: "users"}, Columns: []tableset.Column{{Name: "x"}}}), true, "Retryable"},
		{"a column vanished under the stream", &cdc.ColumnVanishedError{Op: "apply", Err: &pgconn.PgError{Code: "42703"}}, true, "Retryable"},
		{"concurrent CREATE IF NOT EXISTS", fmt.Errorf("create work tables: %w", &pgconn.PgError{Code: "23505", ConstraintName: "pg_type_typname_nsp_index"}), true, "Retryable"},
		{"duplicate table", &pgconn.PgError{Code: "42P07"}, true, "Retryable"},
		{"duplicate object", &pgconn.PgError{Code: "42710"}, true, "Retryable"},
		{"input error of pgerr", pgerr.BadInput("no file %s", "x.csv"), true, unchanged},
		{"deadline", fmt.Errorf("copy: %w", context.DeadlineExceeded), true, unchanged},
		{"lock not available", &pgconn.PgError{Code: "55P03"}, true, unchanged},
		{"unknown", errors.New("something odd"), true, unchanged},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err)
			if c.typ == unchanged {
				if got != c.err {
					t.Fatalf("classify(%v) = %T %v, want it unchanged", c.err, got, got)
				}
				return
			}
			var appErr *temporal.ApplicationError
			if !errors.As(got, &appErr) {
				t.Fatalf("classify(%v) = %T %v, want an application error of type %q", c.err, got, got, c.typ)
			}
			if appErr.NonRetryable() == c.retryable || appErr.Type() != c.typ {
				t.Fatalf("classify(%v): type %q non-retryable %v; want type %q retryable %v", c.err, appErr.Type(), appErr.NonRetryable(), c.typ, c.retryable)
			}
			if !strings.HasPrefix(appErr.Error(), c.err.Error()) {
				t.Fatalf("classify(%v) says %q, not the error's own message", c.err, appErr.Error())
			}
		})
	}
	if got := classify(fmt.Errorf("copy: %w", rls)); !strings.Contains(got.Error(), "; fix: "+pgerr.RowSecurityFix) {
		t.Fatalf("a row-security refusal must carry its fix: %v", got)
	}
	if got := classify(wrong); got != wrong {
		t.Fatalf("an application error must pass unchanged: %v", got)
	}
	if classify(nil) != nil {
		t.Fatal("classify(nil) != nil")
	}
	if err := classify(context.Canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancellation must stay cancellation: %v", err)
	}
}

// A password is added only to what drivers get, never to messages.
func TestResolverKeepsThePasswordOut(t *testing.T) {
	const pw = "s3cr'et"
	r := &Resolver{Control: "postgres://ctl@h:1/c", Shards: map[string]string{
		"url": "postgres://app@h:5432/db?sslmode=disable", "kv": "host=h port=5432 user=app dbname=db",
	}, Password: pw}
	for name := range r.Shards {
		dsn, err := r.dsn(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.Password != pw {
			t.Fatalf("%s: driver gets password %q", name, cfg.Password)
		}
		repl, err := r.replicationDSN(name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err := pgconn.ParseConfig(repl); err != nil || cfg.RuntimeParams["replication"] != "database" || cfg.Password != pw {
			t.Fatalf("%s replication DSN: %v %v", name, err, cfg)
		}
	}
	_, err := r.dsn("nope")
	if err == nil || strings.Contains(err.Error(), pw) || !strings.Contains(err.Error(), "kv, url") {
		t.Fatalf("unknown shard: %v", err)
	}
	p := &pools{r: &Resolver{Shards: map[string]string{"bad": "postgres://u@h:notaport/db"}, Password: pw}}
	if _, err := p.shard(context.Background(), "bad"); err == nil || strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "notaport") {
		t.Fatalf("bad DSN error leaks it: %v", err)
	}
}

// A live chunk-size change (reshard throttle --copy-chunk-rows) wins over
// the migration's setting; 0 keeps the setting.
func TestCopyChunkRows(t *testing.T) {
	in := workflows.CopySliceInput{ChunkRows: 5000}
	if got := copyChunkRows(in); got != 5000 {
		t.Errorf("no live change: %d", got)
	}
	in.Throttle.ChunkRows = 777
	if got := copyChunkRows(in); got != 777 {
		t.Errorf("live change: %d", got)
	}
}

// The copy's end comes from its recent rate: none before two samples; the
// rows left (estimate − committed before the slice − committed by it) at
// the window's rate after, counted from the last committed chunk, so a
// heartbeat a second later says the same end and a second less left; due
// at once past the estimate.
func TestCopyMeterEnd(t *testing.T) {
	m := newCopyMeter(workflows.MoveSpec{EstRows: 10_000}, nil, []backfill.Checkpoint{{Table: "t", Rows: 4_000}})
	m.rowsWin.MinSpan, m.workWin.MinSpan = 200*time.Millisecond, 200*time.Millisecond
	if _, ok := m.end(); ok {
		t.Fatal("an estimate before any progress")
	}
	if hb, _, ok := m.heartbeat(time.Now()); ok || hb[workflows.HeartbeatETAMillis] != -1 || hb[workflows.HeartbeatCopyEndMillis] != -1 {
		t.Fatalf("heartbeat without an estimate: %v", hb)
	}
	m.progress(backfill.Progress{Rows: 0})
	time.Sleep(200 * time.Millisecond)
	m.progress(backfill.Progress{Rows: 1_000, Bytes: 1})
	chunk := time.Now()
	end, ok := m.end()
	// 5,000 rows left at ~5,000 rows/s: about a second after the chunk.
	if eta := end.Sub(chunk); !ok || eta < 500*time.Millisecond || eta > 1500*time.Millisecond {
		t.Fatalf("end %s after the last chunk, %v; want about 1s", eta, ok)
	}
	for _, late := range []time.Duration{0, 300 * time.Millisecond, 5 * time.Second} {
		now := chunk.Add(late)
		hb, left, ok := m.heartbeat(now)
		if want := max(end.Sub(now), 0); !ok || left != want || hb[workflows.HeartbeatETAMillis] != want.Milliseconds() {
			t.Errorf("heartbeat %s after the chunk: %v, left %s; want %s", late, hb, left, want)
		}
		if hb[workflows.HeartbeatSliceRows] != 1_000 || hb[workflows.HeartbeatCopyEndMillis] != end.UnixMilli() {
			t.Errorf("heartbeat %s after the chunk: %v; want 1000 rows, end %d", late, hb, end.UnixMilli())
		}
	}
	m.progress(backfill.Progress{Rows: 6_000, Bytes: 2})
	if end, ok := m.end(); !ok || time.Since(end) > time.Second {
		t.Fatalf("end at the estimate: %s %v; want now", end, ok)
	}
}

// A move's window goes from one slice to the next, so the time between
// slices counts against the rate and the next slice has an estimate from
// its first chunk; a finished copy keeps none, an idle window is dropped.
func TestCopyRatesAcrossSlices(t *testing.T) {
	var r copyRates
	first := r.meter(workflows.MoveSpec{ID: "m", EstRows: 10_000}, nil, nil)
	first.rowsWin.MinSpan, first.workWin.MinSpan, first.group.win.MinSpan = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	first.progress(backfill.Progress{Rows: 0})
	time.Sleep(100 * time.Millisecond)
	first.progress(backfill.Progress{Rows: 1_000})
	r.keep("m", first, false)
	r.release("", first)
	time.Sleep(200 * time.Millisecond) // between slices

	next := r.meter(workflows.MoveSpec{ID: "m", EstRows: 10_000}, nil, []backfill.Checkpoint{{Table: "t", Rows: 1_000}})
	next.progress(backfill.Progress{Rows: 1_000})
	end, ok := next.end()
	if !ok {
		t.Fatal("no estimate after the next slice's first chunk")
	}
	// 2,000 rows in 300 ms or more: 8,000 left take 1.2 s or more; without
	// the gap, 1,000 rows a 100 ms said 0.8 s.
	if eta := time.Until(end); eta < 1100*time.Millisecond {
		t.Errorf("ETA %s: the time between slices did not count", eta)
	}
	if again := r.meter(workflows.MoveSpec{ID: "m", EstRows: 10_000}, nil, []backfill.Checkpoint{{Table: "t", Rows: 2_000}}); !again.at.IsZero() {
		t.Error("a window handed to a running slice was handed out again")
	}
	r.keep("m", next, true)
	if done := r.meter(workflows.MoveSpec{ID: "m", EstRows: 10_000}, nil, []backfill.Checkpoint{{Table: "t", Rows: 10_000}}); !done.at.IsZero() {
		t.Error("a finished copy kept its window")
	}
	r.keep("m", next, false)
	kept := r.m["m"]
	kept.at = time.Now().Add(-time.Minute)
	r.m["m"] = kept
	if idle := r.meter(workflows.MoveSpec{ID: "m", EstRows: 10_000}, nil, []backfill.Checkpoint{{Table: "t", Rows: 2_000}}); !idle.at.IsZero() {
		t.Error("a window idle for a minute was kept")
	}
}

// The copy's work weighs a row by its table's estimated width: with a
// narrow table copied first, the rows of a wide one left for later are not
// expected at the narrow one's pace. Rows an earlier slice checkpointed
// count for their own table.
func TestCopyMeterWeighsWideRows(t *testing.T) {
	spec := workflows.MoveSpec{EstRows: 2_000, EstTables: []workflows.TableEstimate{
		{Table: "public.narrow", Rows: 1_000, Bytes: 0},          // weight 1
		{Table: "public.wide", Rows: 1_000, Bytes: 1_000 * 1024}, // weight 1 + 1024/512 = 3
	}}
	narrow := ring.Range{Lo: ring.MinToken, Hi: ring.MaxToken}
	m := newCopyMeter(spec, nil, nil)
	m.rowsWin.MinSpan, m.workWin.MinSpan = 200*time.Millisecond, 200*time.Millisecond
	before := time.Now()
	m.progress(backfill.Progress{Table: "public.narrow", Range: narrow, UnitRows: 0})
	time.Sleep(200 * time.Millisecond)
	m.progress(backfill.Progress{Table: "public.narrow", Range: narrow, UnitRows: 500, Rows: 500})
	took := time.Since(before)
	end, ok := m.end()
	if !ok {
		t.Fatal("no estimate")
	}
	// 500 narrow rows in d: 500 narrow + 1,000 wide rows (3,500 units) take
	// 7 d; by rows alone, 3 d.
	if eta := end.Sub(m.at); eta < 1400*time.Millisecond || eta > 7*took {
		t.Errorf("ETA %s, want 7 times the %s–%s the first 500 rows took", eta, 200*time.Millisecond, took)
	}
	if _, left := m.work(); left != 3_500 {
		t.Errorf("work left %.0f, want 3500", left)
	}
	// Under a rows/s throttle every row takes the same: 1,500 rows left
	// take 3 d.
	m.throttle = backfill.NewThrottle(1_000, 0)
	if end, _ := m.end(); end.Sub(m.at) < 600*time.Millisecond || end.Sub(m.at) > 3*took {
		t.Errorf("throttled ETA %s, want 3 times the %s–%s the first 500 rows took", end.Sub(m.at), 200*time.Millisecond, took)
	}
	// The next slice: the narrow table done by an earlier one.
	next := newCopyMeter(spec, nil, []backfill.Checkpoint{{Table: "public.narrow", RangeLo: narrow.Lo, RangeHi: narrow.Hi, Rows: 1_000, Done: true}})
	if done, left := next.work(); done != 1_000 || left != 3_000 {
		t.Errorf("work done %.0f, left %.0f; want 1000 and 3000", done, left)
	}
}

func TestTableEstimates(t *testing.T) {
	got := tableEstimates([]tableset.Estimate{
		{Table: "public.orders", Rows: 10, Bytes: 100}, {Table: "public.users", Rows: 5, Bytes: 500}, {Table: "public.orders", Rows: 20, Bytes: 200},
	})
	want := []workflows.TableEstimate{{Table: "public.orders", Rows: 30, Bytes: 300}, {Table: "public.users", Rows: 5, Bytes: 500}}
	if !slices.Equal(got, want) {
		t.Errorf("tableEstimates = %v, want %v", got, want)
	}
}

// A worker's copies into one target see each other while their slices run:
// a second copy starting beside the first doubles its estimate, and the
// first is alone again when the second's slice ends. A copy under a rows/s
// limit keeps its own pace, and so does a copy into another target.
func TestCopyMetersShareTheirTarget(t *testing.T) {
	var r copyRates
	spec := workflows.MoveSpec{ID: "a", Target: "shard5", EstRows: 10_000}
	a := r.meter(spec, nil, nil)
	// a's own window is 200 ms long whatever its age, so that after b starts
	// it covers the same chunks as the group's, which b's start emptied: a
	// window of half the copy's age (eta.Window) reached back past the gap
	// between a's chunks before and after b started, a few milliseconds on
	// an idle machine, tens in CI, and the two rates parted by that much.
	a.workWin.MinSpan, a.workWin.Span, a.group.win.MinSpan = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
	a.progress(backfill.Progress{Rows: 0})
	time.Sleep(200 * time.Millisecond)
	a.progress(backfill.Progress{Rows: 1_000})
	alone, ok := a.end()
	if !ok {
		t.Fatal("no estimate")
	}
	other := r.meter(workflows.MoveSpec{ID: "c", Target: "shard6", EstRows: 10_000}, nil, nil)
	b := r.meter(workflows.MoveSpec{ID: "b", Target: "shard5", EstRows: 10_000}, nil, nil)
	if _, ok := a.end(); ok {
		t.Error("an estimate from the rate of the copies before another move started")
	}
	a.progress(backfill.Progress{Rows: 1_000}) // the window starts again
	time.Sleep(200 * time.Millisecond)
	a.progress(backfill.Progress{Rows: 2_000})
	alone, _ = a.workWin.End(8_000, 0)
	shared, ok := a.end()
	if !ok {
		t.Fatal("no estimate")
	}
	// 8,000 left at half the rate: twice the time left alone (the group's
	// window and a's own saw the same two chunks since b started, at the
	// same instants). Within 1 %, for the float arithmetic; half or one and
	// a half times would be far outside it.
	if got, want := shared.Sub(a.at), 2*alone.Sub(a.at); (got - want).Abs() > want/100 {
		t.Errorf("beside a starting copy: %s left, want %s (twice %s)", got, want, alone.Sub(a.at))
	}
	r.release("shard6", other)
	r.release("shard5", b)
	near := func(a, b time.Time) bool { return a.Sub(b).Abs() < 10*time.Millisecond }
	if again, _ := a.end(); !near(again, alone) {
		t.Errorf("after the other copy's slice ended: end %s, want %s", again, alone)
	}
	b = r.meter(workflows.MoveSpec{ID: "b", Target: "shard5", EstRows: 10_000}, backfill.NewThrottle(100, 0), nil)
	if got, _ := a.end(); !near(got, alone) {
		t.Errorf("beside a copy under a rows/s limit: end %s, want its own %s", got, alone)
	}
	r.release("shard5", b)
	r.release("shard5", a)
	for name, tc := range r.targets {
		if len(tc.live) != 0 {
			t.Errorf("copies into %s left after every slice ended: %v", name, tc.live)
		}
	}
}

// The pause's steps are the cutover's from the fence to the unfence, and
// what the journal's records took between them.
func TestPauseSteps(t *testing.T) {
	ms := time.Millisecond
	got := pauseSteps(cutover.Result{WritePause: 90 * ms, Steps: []cutover.StepTiming{
		{Step: cutover.StepGates, Duration: 500 * ms}, {Step: cutover.StepFenceSource, Duration: 5 * ms},
		{Step: cutover.StepWaitInFlight, Duration: 10 * ms}, {Step: cutover.StepMarker, Duration: 2 * ms},
		{Step: cutover.StepDrain, Duration: 60 * ms}, {Step: cutover.StepPublish, Duration: 15 * ms},
		{Step: cutover.StepUnfenceTarget, Duration: 3 * ms}}}, 105*ms)
	if s := workflows.PauseStepsText(got); s != "fence-source 5ms, wait-in-flight 10ms, marker 2ms, drain 60ms, publish 15ms, unfence-target 3ms, journal 10ms" {
		t.Errorf("pause steps %q", s)
	}
}

// The workflows import no data-plane package, so pgerr spells their error
// types again: the two spellings must be one.
func TestStopKindsAreTheWorkflows(t *testing.T) {
	for kind, typ := range map[string]string{
		pgerr.StopBadInput:      workflows.ErrTypeBadInput,
		pgerr.StopPreflight:     workflows.ErrTypePreflight,
		pgerr.StopCollision:     workflows.ErrTypeCollision,
		pgerr.StopSchemaChange:  workflows.ErrTypeSchemaChange,
		pgerr.StopFailedOver:    workflows.ErrTypeFailedOver,
		pgerr.StopFiringTrigger: workflows.ErrTypeFiringTrigger,
	} {
		if kind != typ {
			t.Errorf("pgerr's stop %q is the workflows' %q", kind, typ)
		}
	}
}
