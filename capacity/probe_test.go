package capacity

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// half is the lower half of the token space.
var half = []ring.Range{{Lo: math.MinInt64, Hi: 0}}

// pair is a source holding 20,000 users and an empty target, and the
// move of the lower half of the token space between them.
func pair(t *testing.T) (src, dst *pgtest.DB, in MoveInput, pools Pools) {
	t.Helper()
	src, dst = pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	ddl := `CREATE TABLE users (id bigint PRIMARY KEY, email text NOT NULL, pad text);
		CREATE INDEX users_email ON users (email);
		CREATE TABLE noise (id bigserial PRIMARY KEY, pad text)`
	src.Exec(t, ddl)
	dst.Exec(t, ddl)
	src.Exec(t, `INSERT INTO users SELECT g, 'u'||g||'@x', repeat('p', 200) FROM generate_series(1, 20000) g; ANALYZE users`)
	ctx := context.Background()
	set, err := tableset.Introspect(ctx, src.Pool, tableset.Spec{Name: "app", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	ests, err := tableset.EstimateRanges(ctx, src.Pool, set.Tables[0], half)
	if err != nil {
		t.Fatal(err)
	}
	in = MoveInput{ID: "m1", Source: "src", Target: "dst", Ranges: half, Tables: set.Tables, Estimates: ests}
	pools = func(_ context.Context, shard string) (*pgxpool.Pool, error) {
		if shard == "src" {
			return src.Pool, nil
		}
		return dst.Pool, nil
	}
	return src, dst, in, pools
}

// writeWAL writes about 2 MB/s of rows to the source's noise table until
// the test's work is done.
func writeWAL(t *testing.T, db *pgtest.DB) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := db.Pool.Exec(ctx, `INSERT INTO noise (pad) SELECT repeat(md5(g::text), 32) FROM generate_series(1, 200) g`); err != nil && ctx.Err() == nil {
				t.Errorf("write WAL: %v", err)
				return
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func lsn(t *testing.T, db *pgtest.DB) string {
	var s string
	if err := db.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAssessProbesTheRealServersAndChangesNothing(t *testing.T) {
	src, dst, in, pools := pair(t)
	insertsCounted(t, src, "users", 20000)
	stop := writeWAL(t, src)
	defer stop()
	time.Sleep(300 * time.Millisecond) // the writer is steady
	lsn0, t0 := lsn(t, src), time.Now()
	rep, err := Assess(context.Background(), pools, []MoveInput{in}, AssessOptions{WALWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(t0)
	wal := src.QueryInt64(t, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, lsn0)
	stop()
	var sp ShardProbe
	for _, p := range rep.Probes {
		if p.Shard == "src" {
			sp = p
		}
	}
	// The probe's window lies inside [t0, now]: what it saw is at most what
	// was written, and the writer is steady, so not much less per second.
	// The cleanup's probe of page-sized WAL, after the window, left out.
	wal -= imageProbeBytes
	overall := float64(wal) / elapsed.Seconds()
	t.Logf("WAL rate %s/s over the probe's window, %s/s over the whole call; max_slot_wal_keep_size %d", HumanBytes(int64(sp.WALBytesPerSec)), HumanBytes(int64(overall)), sp.MaxSlotWALKeep)
	if sp.WALBytesPerSec*sp.WALWindow.Seconds() > float64(wal)*1.05 || sp.WALBytesPerSec < overall/3 || sp.WALBytesPerSec < 500_000 {
		t.Errorf("WAL rate %.0f B/s: want about the writer's (%.0f B/s overall)", sp.WALBytesPerSec, overall)
	}
	if sp.MaxSlotWALKeep != -1 || sp.MaxWALSize <= 0 || sp.RTT <= 0 {
		t.Errorf("settings: %+v", sp)
	}
	m := rep.Moves[0]
	t.Logf("%+v", m)
	size := src.QueryInt64(t, `SELECT pg_table_size('users')`)
	idx := src.QueryInt64(t, `SELECT pg_indexes_size('users')`)
	if m.TargetGrowth < size*4/10+idx*4/10 || m.TargetGrowth > size*6/10+idx*6/10 {
		t.Errorf("target growth %d: want about half of the table (%d) and its indexes (%d)", m.TargetGrowth, size, idx)
	}
	if m.Copy <= 0 || m.Verify <= 0 || m.WritePause <= 0 || m.SlotWAL <= 0 || !strings.Contains(m.Basis, "rows of public.users copied as the copy does") {
		t.Errorf("prediction not calibrated: %+v", m)
	}
	// The WAL comes from writes to noise, which does not move: the stream
	// has no change to apply, however much WAL its slot holds (the WAL's
	// share at the copy's rate, the rule before, said otherwise); it only
	// decodes that WAL, at the rate the probe timed on a temporary slot.
	if m.ChangesPerSec != 0 || m.HeldChanges != 0 || !m.Converges || m.ApplyChangesPerSec <= 0 ||
		!strings.Contains(m.Basis, "catch-up: 0 row changes/s in the moving ranges, of 0/s to its tables") {
		t.Errorf("%d changes held, %.0f/s in the ranges, applier %.0f/s: want none to apply, the applier timed; basis %q",
			m.HeldChanges, m.ChangesPerSec, m.ApplyChangesPerSec, m.Basis)
	}
	// And streamed by a walsender, as the stream reads it, over a
	// replication connection: the catch-up is that connection and the
	// slot's WAL at the walsender's rate.
	if d := sp.Decode; d == nil || d.NotMeasured != "" || d.Bytes <= 0 || d.Time <= 0 || m.DecodeBytesPerSec <= 0 ||
		d.StreamNotMeasured != "" || d.StreamBytes <= 0 || d.StreamTime <= 0 || d.StreamConnect <= 0 || !m.DecodeStreamed ||
		m.DecodeBytesPerSec != d.StreamRate() || !strings.Contains(m.Basis, "of WAL decoded on src in") || !strings.Contains(m.Basis, "streamed by its walsender in") {
		t.Errorf("the source's decoding %+v, %.0f B/s: want the window's WAL decoded and streamed, timed", d, m.DecodeBytesPerSec)
	} else if want := d.StreamConnect.Seconds() + float64(m.SlotWAL)/(m.DecodeBytesPerSec-sp.WALBytesPerSec); !m.DecodeBound || math.Abs(float64(m.CatchUp)-want) > want*0.001 {
		t.Errorf("catch-up %.3fs (by decoding %v): want the replication connection and the slot's WAL streamed, %.3fs", float64(m.CatchUp), m.DecodeBound, want)
	}
	noSlotsLeft(t, src)
	if n := dst.QueryInt64(t, `SELECT count(*) FROM users`); n != 0 {
		t.Errorf("the probe left %d rows on the target", n)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname LIKE 'capacity_probe%'`); n != 0 {
		t.Errorf("the probe left its table on the target")
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'reshard%'`); n != 0 {
		t.Errorf("the probe left a schema reshard… on the target")
	}
	// The users of the lower half (about 10,000 rows, 2.5 MB) are fewer
	// than the probe's 32 MiB: it copied them all, by primary key (half
	// the token space) in chunks of the copy's 5,000 rows (the last one short), and checksummed
	// them with the verify's two workers a side, on the source and on the
	// copied rows on the target at once.
	if want := src.QueryInt64(t, `SELECT count(*) FROM users WHERE hashint8extended(id, 0) < 0`); !strings.Contains(m.Basis, fmt.Sprintf("%d rows of public.users copied as the copy does (%d chunks by pk", want, want/5000+1)) ||
		!strings.Contains(m.Basis, "both sides at once (2 workers a side)") || !strings.Contains(m.Basis, "of the copied rows on dst") || !strings.Contains(m.Basis, "other active sessions on src") {
		t.Errorf("basis %q: want the %d rows of the range copied in chunks of 5,000 by pk (the last one short), checksummed by 2 workers a side on both sides, and the load seen", m.Basis, want)
	}
}

// TestProbeMoveReadsBothSidesAndLeavesNothing: the verify's probe reads
// the source's moving rows and, at the same time, the rows the copy's
// probe wrote on the target, with the verify's workers on each side (no
// more than the target's pool can hold beside the load's sampler), and
// nothing is left on the target.
func TestProbeMoveReadsBothSidesAndLeavesNothing(t *testing.T) {
	src, dst, in, _ := pair(t)
	ctx := context.Background()
	moving := src.QueryInt64(t, `SELECT count(*) FROM users WHERE hashint8extended(id, 0) < 0`)
	cfg, err := pgxpool.ParseConfig(dst.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	small, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	for _, tc := range []struct {
		name    string
		dst     *pgxpool.Pool
		workers int
	}{
		{"the verify's two workers a side", dst.Pool, 2},
		{"a target pool of two connections: one a side", small, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ProbeMove(ctx, src.Pool, tc.dst, in.Tables[0], in.Ranges, 250, ProbeOptions{MinTime: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", p)
			// The copy's sample took all the moving rows (under 32 MiB): the
			// source's side reads each once at least, the target's the copies.
			if p.SampleRows != moving || p.VerifyWorkers != tc.workers || p.VerifyRows < moving || p.VerifyTargetRows < moving/2 ||
				p.VerifySourceBusy <= 0 || p.VerifyTargetBusy <= 0 || p.VerifyTime <= 0 || p.VerifyTargetBytes != p.VerifyTargetRows*250 {
				t.Errorf("probe %+v: want the %d moving rows copied, and checksummed on both sides by %d workers a side", p, moving, tc.workers)
			}
			// The cleanup's probes: its search finds every moving row on
			// the source (fewer than its time bound), its deletes take the
			// rows of a target transaction, and the source wrote 32 MiB of
			// page-sized WAL; the source keeps every row.
			if p.CleanupFindRows != moving || p.CleanupFindTime <= 0 || p.CleanupDeleteRows <= 0 || p.CleanupDeleteRows > p.SampleRows ||
				p.CleanupDeleteTime <= 0 || p.ImageBytes < imageProbeBytes || p.ImageTime <= 0 || p.ImageNotMeasured != "" {
				t.Errorf("probe %+v: want the cleanup's search to find the %d moving rows, its deletes and the images' WAL timed", p, moving)
			}
			if n := src.QueryInt64(t, `SELECT count(*) FROM users WHERE hashint8extended(id, 0) < 0`); n != moving {
				t.Errorf("the source has %d moving rows after the probe, had %d", n, moving)
			}
			if r := p.VerifyRate(); r <= 0 || r > float64(p.VerifyBytes+p.VerifyTargetBytes)/p.VerifyTime.Seconds() {
				t.Errorf("verify rate %.0f B/s: want a side's bytes over the pair's time", r)
			}
			if n := dst.QueryInt64(t, `SELECT count(*) FROM users`); n != 0 {
				t.Errorf("the probe left %d rows in the target's users", n)
			}
			if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname LIKE 'capacity_probe%'`); n != 0 {
				t.Errorf("the probe left its tables on the target")
			}
			if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'reshard%'`); n != 0 {
				t.Errorf("the probe left its schemas on the target")
			}
		})
	}
}

// noSlotsLeft fails the test if db's server keeps a replication slot (a
// temporary one goes when its session has ended, a moment after its
// connection closed).
func noSlotsLeft(t *testing.T, db *pgtest.DB) {
	t.Helper()
	var n int64
	for range 40 {
		if n = db.QueryInt64(t, `SELECT count(*) FROM pg_replication_slots`); n == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("the probe left %d replication slots on the source", n)
}

// insertsCounted waits until pg_stat_user_tables counts the n rows
// inserted into table (a backend reports its counts up to a second
// later): a probe's window after it sees only what follows.
func insertsCounted(t *testing.T, db *pgtest.DB, table string, n int64) {
	t.Helper()
	for range 100 {
		if db.QueryInt64(t, `SELECT coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = $1), 0)`, table) >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("pg_stat_user_tables does not count the %d rows inserted into %s", n, table)
}

// TestAssessMeasuresTheCatchUpsWork: the application's row changes to the
// moving table over the probe's WAL window (here a writer updating 30 and
// inserting 10 users every 50 ms, 800 changes/s), their share in the moving ranges (half
// the token space), and the applier's rate on the rows the copy's probe
// wrote, in the source's mix of changes; the catch-up is the changes held
// over that rate.
func TestAssessMeasuresTheCatchUpsWork(t *testing.T) {
	src, dst, in, pools := pair(t)
	insertsCounted(t, src, "users", 20000)
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int64 // changes committed
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		next, from := int64(100_000), int64(0)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_, err := src.Pool.Exec(ctx, `WITH u AS (UPDATE users SET email = email || 'x' WHERE id > $2 AND id <= $2 + 30 RETURNING 1)
				INSERT INTO users SELECT g, 'n'||g||'@x', 'p' FROM generate_series($1::bigint, $1::bigint + 9) g`, next, from)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("write users: %v", err)
				}
				return
			}
			next, from = next+10, (from+30)%19_950
			mu.Lock()
			done += 40
			mu.Unlock()
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(time.Second) // the writer is steady, and so are its reports
	count := func() int64 { mu.Lock(); defer mu.Unlock(); return done }
	c0, t0 := count(), time.Now()
	// The verify's probe's 3 s are not this test's: 300 ms.
	rep, err := Assess(context.Background(), pools, []MoveInput{in}, AssessOptions{WALWindow: 4 * time.Second, Probe: ProbeOptions{MinTime: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	writerRate := float64(count()-c0) / time.Since(t0).Seconds()
	cancel()
	wg.Wait()
	var sp ShardProbe
	for _, p := range rep.Probes {
		if p.Shard == "src" {
			sp = p
		}
	}
	if len(sp.Tables) != 1 || sp.Tables[0].Table != "public.users" {
		t.Fatalf("the source's probe read the changes of %+v: want public.users", sp.Tables)
	}
	tc := sp.Tables[0]
	measured := float64(tc.Changes()) / sp.WAL.Window.Seconds()
	m := rep.Moves[0]
	t.Logf("writer %.0f changes/s; probe: %+v over %s (%.0f/s), %.0f/s in the ranges; applier %.0f/s; catch-up %s of %d held; %s",
		writerRate, tc, sp.WAL.Window, measured, m.ChangesPerSec, m.ApplyChangesPerSec, m.CatchUp.Duration(), m.HeldChanges, m.Basis)
	// A backend reports its counts about once a second: over 4 s the
	// window can gain or lose up to a second of them.
	if measured < writerRate*0.5 || measured > writerRate*1.6 || tc.Inserts == 0 || tc.Updates == 0 || tc.Deletes != 0 {
		t.Errorf("measured %.0f changes/s (%+v): want about the writer's %.0f/s, inserts and updates, no deletes", measured, tc, writerRate)
	}
	if share := m.ChangesPerSec / measured; share < 0.35 || share > 0.65 {
		t.Errorf("%.0f changes/s in the moving ranges of %.0f/s: want about half (the ranges' share of the table)", m.ChangesPerSec, measured)
	}
	// The copy's probe wrote the range's ~10,000 rows; the applier's probe
	// applied a catch-up's batch of them, staged (over 1,000 a flush).
	if m.ApplyChangesPerSec < 1000 || !strings.Contains(m.Basis, "applied as the stream applies them (staged") {
		t.Errorf("applier %.0f changes/s, basis %q: want it timed on the staged path", m.ApplyChangesPerSec, m.Basis)
	}
	if !m.Converges || m.CatchUp <= 0 || m.HeldChanges != int64(m.ChangesPerSec*float64(m.Copy)) {
		t.Errorf("catch-up %s, %d changes held: want the changes of the copy's %s applied", m.CatchUp.Duration(), m.HeldChanges, m.Copy.Duration())
	}
	// The longer of applying the held changes and decoding the slot's WAL.
	// The held changes as the model counts them, not HeldChanges's whole
	// number: 26 for 26.9 is 3 % off when the applying binds (CI,
	// 2026-12-04 05:27, where the decoding was quick).
	want := m.ChangesPerSec * float64(m.Copy) / (m.ApplyChangesPerSec - m.ChangesPerSec)
	if m.DecodeBytesPerSec > sp.WALBytesPerSec {
		want = max(want, sp.Decode.StreamConnect.Seconds()+float64(m.SlotWAL)/(m.DecodeBytesPerSec-sp.WALBytesPerSec))
	}
	if math.Abs(float64(m.CatchUp)-want) > want*0.01 || m.DecodeBytesPerSec <= 0 {
		t.Errorf("catch-up %.4fs (decoding at %.0f B/s), want %.4fs", float64(m.CatchUp), m.DecodeBytesPerSec, want)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM users`); n != 0 {
		t.Errorf("the probe left %d rows on the target", n)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname LIKE 'capacity_probe%' OR relname LIKE 'reshard_stage%'`); n != 0 {
		t.Errorf("the probe left its tables on the target")
	}
}

// A transaction open on the source holds a logical slot's creation: the
// probe's decoding gives up after decodeSlotWait, says why, and the rest
// of the probe goes on.
func TestProbeShardDoesNotWaitForALongTransaction(t *testing.T) {
	defer func(d time.Duration) { decodeSlotWait = d }(decodeSlotWait)
	decodeSlotWait = 500 * time.Millisecond
	src, _, in, _ := pair(t)
	conn := src.Conn(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `BEGIN; INSERT INTO noise (pad) VALUES ('held open')`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, `ROLLBACK`) }()
	start := time.Now()
	p, err := ProbeShard(ctx, "src", src.Pool, time.Second, in.Tables...)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("probe took %s: decoding %+v", took, p.Decode)
	if p.Decode == nil || !strings.Contains(p.Decode.NotMeasured, "waiting for the transactions running then to end") || p.Decode.Rate() != 0 {
		t.Errorf("decode %+v: want not measured, and why", p.Decode)
	}
	if took > decodeSlotWait+5*time.Second || len(p.Tables) != 1 || p.WAL.Window <= 0 {
		t.Errorf("probe took %s (%+v): want the slot's wait bounded and the rest measured", took, p)
	}
	noSlotsLeft(t, src)
}

func TestAssessRefusesWhatOverflowsMaxSlotWALKeepSize(t *testing.T) {
	src, _, in, pools := pair(t)
	setKeep(t, src, "64MB")
	stop := writeWAL(t, src)
	defer stop()
	time.Sleep(300 * time.Millisecond)
	for _, tc := range []struct {
		name       string
		rowsPerSec float64
		refused    bool
	}{
		// About 10,000 rows at 50 rows/s: 200 s of copy at about 2 MB/s of WAL.
		{"a slow copy overflows", 50, true},
		{"an unthrottled copy fits", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Assess(context.Background(), pools, []MoveInput{in}, AssessOptions{WALWindow: time.Second, Options: Options{RowsPerSec: tc.rowsPerSec}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("copy %s, slot WAL %s, budget %s", rep.Moves[0].Copy.Duration(), HumanBytes(rep.Shards[1].PeakSlotWAL), HumanBytes(rep.Shards[1].WALBudget))
			if refused := len(rep.Refusals) > 0; refused != tc.refused {
				t.Fatalf("refusals %v, want refused %v", rep.Refusals, tc.refused)
			}
			if tc.refused {
				r := rep.Refusals[0]
				if r.Shard != "src" || r.Check != "wal" || !strings.Contains(r.Problem, "64.0 MiB (max_slot_wal_keep_size)") || !strings.Contains(r.Fix, "faster throttle") {
					t.Errorf("refusal: %v", r)
				}
			}
		})
	}
}

func TestAssessRefusesWhatOverflowsTheTargetsDisk(t *testing.T) {
	_, _, in, pools := pair(t)
	for _, tc := range []struct {
		name    string
		disk    int64
		refused bool
	}{
		{"too little disk", 1 << 20, true},
		{"enough disk", 1 << 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Assess(context.Background(), pools, []MoveInput{in}, AssessOptions{WALWindow: 200 * time.Millisecond,
				Budgets: map[string]Budget{"dst": {DiskBytes: tc.disk}}})
			if err != nil {
				t.Fatal(err)
			}
			if refused := len(rep.Refusals) > 0; refused != tc.refused {
				t.Fatalf("refusals %v, want refused %v", rep.Refusals, tc.refused)
			}
			if tc.refused && (rep.Refusals[0].Shard != "dst" || rep.Refusals[0].Check != "disk") {
				t.Errorf("refusal: %v", rep.Refusals[0])
			}
		})
	}
}

// setKeep sets max_slot_wal_keep_size on db's server until the test ends.
func setKeep(t *testing.T, db *pgtest.DB, v string) { setConf(t, db, "max_slot_wal_keep_size", v) }

// setConf sets a reloadable setting on db's server until the test ends.
func setConf(t *testing.T, db *pgtest.DB, name, v string) {
	t.Helper()
	db.Exec(t, `ALTER SYSTEM SET `+name+` = '`+v+`'`)
	db.Exec(t, `SELECT pg_reload_conf()`)
	t.Cleanup(func() {
		db.Exec(t, `ALTER SYSTEM RESET `+name)
		db.Exec(t, `SELECT pg_reload_conf()`)
	})
	for range 50 { // the reload reaches the backends a moment later
		var got string
		if err := db.Pool.QueryRow(context.Background(), `SELECT current_setting($1)`, name).Scan(&got); err == nil && got == v {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not become %s", name, v)
}
