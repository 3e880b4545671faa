package verify

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestProbeSourceChecksumsTheRangesChunks: Probe without targets
// checksums the source's moving rows in the verify's planned chunks, its
// workers at once, and stops at its bounds.
func TestProbeSourceChecksumsTheRangesChunks(t *testing.T) {
	src := pgtest.NewDB(t, 0)
	src.Exec(t, `CREATE TABLE users (id bigint PRIMARY KEY, email text);
		INSERT INTO users SELECT g, 'u'||g FROM generate_series(1, 20000) g; ANALYZE users`)
	ctx := context.Background()
	users, half, want := usersHalf(t, src)
	st, err := Probe(ctx, src.Pool, users, half, ProbeOptions{ChunkRows: 1000, Parallel: 3, MinTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != want || st.Chunks < 5 || st.Workers != 3 || st.Elapsed <= 0 || st.TargetRows != 0 {
		t.Errorf("probe %+v: want all %d rows of the range in chunks of about 1,000, 3 workers, the source alone", st, want)
	}
	st, err = Probe(ctx, src.Pool, users, half, ProbeOptions{ChunkRows: 1000, Parallel: 2, MaxTime: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	// Two of the planned chunks: the plan's bounds come from a page sample,
	// so together they hold anything from a few hundred rows to a few
	// thousand (at least 1,000, as this said before, failed 6 runs in 15).
	if st.Chunks != 2 || st.Rows >= want/2 || st.Rows <= 0 {
		t.Errorf("probe %+v: want a chunk a worker, no more, past MaxTime", st)
	}
	// Those two are the first chunk and one in the plan's upper half, not
	// the first two: a short probe samples the whole table.
	if len(st.Taken) != 2 || st.Taken[0] != 0 || st.Taken[1] < st.Planned/2 || st.Planned < 4 {
		t.Errorf("probe took chunks %v of %d; want the first, then one in the upper half", st.Taken, st.Planned)
	}
}

// TestProbeReadsBothSidesAtOnce: with targets, Probe checksums the rows
// each target transaction holds (uncommitted, so visible to it alone) in
// chunks of the source's size, a worker per target, each pair of chunks
// side by side, and reads the target's rows again when they run out.
func TestProbeReadsBothSidesAtOnce(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE users (id bigint PRIMARY KEY, email text, pad text)`
	const rows = `SELECT g, 'u'||g, repeat('p', 300) FROM generate_series(1, 20000) g`
	src.Exec(t, ddl+`; INSERT INTO users `+rows+`; ANALYZE users`)
	dst.Exec(t, ddl)
	ctx := context.Background()
	users, half, want := usersHalf(t, src)
	// Two open target transactions, each holding 3,000 of the moving rows
	// in a table of its own, as capacity's copy probe leaves them.
	var targets []ProbeTarget
	for i, ids := range []string{"id <= 10000", "id > 10000"} {
		tx, err := dst.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		table := pgx.Identifier{"probe" + string(rune('a'+i)), "users"}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{table[0]}.Sanitize()+`; CREATE TABLE `+table.Sanitize()+` (LIKE public.users INCLUDING ALL);
			INSERT INTO `+table.Sanitize()+` SELECT * FROM (`+rows+`) r (id, email, pad) WHERE hashint8extended(id, 0) < 0 AND `+ids+` ORDER BY id LIMIT 3000`); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, ProbeTarget{Tx: tx, Table: table, Rows: 3000})
	}
	st, err := Probe(ctx, src.Pool, users, half, ProbeOptions{ChunkRows: 1000, Parallel: 5, Targets: targets, MinTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	// Every source chunk once; a target chunk of 1,000 rows (3,000 cut
	// into 3) beside each, so the target's 6,000 rows are read about
	// twice over the source's ~10,000.
	if st.Workers != 2 || st.Rows != want || st.Chunks < 8 || st.TargetRows != 1000*st.Chunks {
		t.Errorf("probe %+v: want 2 workers a side, all %d source rows, and 1,000 target rows beside each source chunk", st, want)
	}
	if st.SourceBusy <= 0 || st.TargetBusy <= 0 {
		t.Errorf("probe %+v: want both sides busy", st)
	}
	// Side by side: one worker's time in checksums on the two sides adds up
	// to more than its time (one after the other, it could not).
	st, err = Probe(ctx, src.Pool, users, half, ProbeOptions{ChunkRows: 1000, Targets: targets[:1], MinTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if st.Workers != 1 || st.Rows != want || st.SourceBusy+st.TargetBusy <= st.Elapsed {
		t.Errorf("probe %+v: want the sides' time in checksums over the probe's (both sides at once), one worker", st)
	}
	// The pair stops at its bounds: a pair of chunks a worker.
	st, err = Probe(ctx, src.Pool, users, half, ProbeOptions{ChunkRows: 1000, Targets: targets, MaxTime: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if st.Chunks != 2 || st.TargetRows != 2000 {
		t.Errorf("probe %+v: want a pair of chunks a worker past MaxTime", st)
	}
}

// usersHalf introspects src's users table and returns it, the half of the
// token space below 0, and how many of its rows that half holds.
func usersHalf(t *testing.T, src *pgtest.DB) (tableset.Table, []ring.Range, int64) {
	t.Helper()
	set, err := tableset.Introspect(context.Background(), src.Pool, tableset.Spec{Name: "app", Tables: []tableset.TableSpec{{Table: "users", KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	half := []ring.Range{{Lo: math.MinInt64, Hi: 0}}
	return set.Tables[0], half, src.QueryInt64(t, `SELECT count(*) FROM users WHERE hashint8extended(id, 0) < 0`)
}
