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
	if m.Copy <= 0 || m.Verify <= 0 || m.WritePause <= 0 || m.SlotWAL <= 0 || m.CatchUp <= 0 || !strings.Contains(m.Basis, "rows of public.users copied as the copy does") {
		t.Errorf("prediction not calibrated: %+v", m)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM users`); n != 0 {
		t.Errorf("the probe left %d rows on the target", n)
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_class WHERE relname LIKE 'capacity_probe%'`); n != 0 {
		t.Errorf("the probe left its table on the target")
	}
	if n := dst.QueryInt64(t, `SELECT count(*) FROM pg_namespace WHERE nspname = 'reshard'`); n != 0 {
		t.Errorf("the probe left the schema reshard on the target")
	}
	// The users of the lower half (about 10,000 rows, 2.5 MB) are fewer
	// than the probe's 32 MiB: it copied them all, by primary key (half
	// the token space) in chunks of the copy's 5,000 rows (the last one short), and checksummed
	// them with the verify's two workers.
	if want := src.QueryInt64(t, `SELECT count(*) FROM users WHERE hashint8extended(id, 0) < 0`); !strings.Contains(m.Basis, fmt.Sprintf("%d rows of public.users copied as the copy does (%d chunks by pk", want, want/5000+1)) ||
		!strings.Contains(m.Basis, "(2 workers)") || !strings.Contains(m.Basis, "other active sessions on src") {
		t.Errorf("basis %q: want the %d rows of the range copied in chunks of 5,000 by pk (the last one short), checksummed by 2 workers, and the load seen", m.Basis, want)
	}
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
