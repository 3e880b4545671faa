package verify

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// TestValuesCompareByIdentity: the row hash hashes a column directly only
// when equal values of its type are identical values, so an exact copy of
// every type compares equal — enums included, whose OIDs differ between the
// servers — and a change that the type's equality ignores is still found.
func TestValuesCompareByIdentity(t *testing.T) {
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	// The target gets an extra enum type first, so its mood labels have
	// other OIDs than the source's.
	dst.Exec(t, `CREATE TYPE other AS ENUM ('x', 'y', 'z')`)
	const ddl = `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
		CREATE DOMAIN cents AS bigint CHECK (VALUE >= 0);
		CREATE TABLE things (
			id int PRIMARY KEY, i2 smallint, i8 bigint, b bool, c "char", nm name, v varchar(12), tx text, by bytea,
			u uuid, d date, tm time, ts timestamp, tz timestamptz, tt timetz, iv interval, n numeric, f float8, r real,
			j jsonb, js json, a int[], ta text[], ip inet, m mood, money cents, pt point)`
	src.Exec(t, ddl)
	dst.Exec(t, ddl)
	const fill = `INSERT INTO things SELECT g, g % 100, g * 1000003, g % 2 = 0, chr(65 + g % 26)::"char", 'n' || g, 'v' || g, 'text ' || g,
			decode(md5(g::text), 'hex'), md5(g::text)::uuid, date '2024-01-01' + g, time '00:00' + g * interval '1 s',
			timestamp '2024-01-01' + g * interval '1 min', timestamptz '2024-01-01 00:00+00' + g * interval '1 min',
			timetz '12:00+01', g * interval '1 h', g / 3.0, g / 7.0, g / 9.0, jsonb_build_object('g', g, 'x', g / 2.0),
			json_build_object('g', g), ARRAY[g, g + 1], ARRAY['a' || g, NULL], '10.0.0.1/8', (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood,
			g * 100, point(g, -g)
		FROM generate_series(1, 2000) g`
	src.Exec(t, fill)
	dst.Exec(t, fill)
	src.Exec(t, "ANALYZE")
	run := func() []Mismatch { return wholeTableMismatches(t, src.Pool, dst.Pool, "things", 500) }
	if got := run(); len(got) != 0 {
		t.Fatalf("an exact copy of every type: %d mismatches, first %+v", len(got), got[0])
	}

	// Each change is invisible to its type's equality (or its hash), but
	// not to the row's value.
	changes := map[int]string{
		11: `n = n::numeric(20,10)`,                               // 1.5 vs 1.5000000000
		12: `f = '-0'::float8`,                                    // = +0, set on both sides below
		13: `iv = interval '1 day'`,                               // = 24 hours, set on both sides below
		14: `tt = timetz '11:00+00'`,                              // = 12:00+01
		15: `j = '{"g": 15, "x": 7.50}'`,                          // = 7.5
		16: `ip = '10.0.0.1/16'`,                                  // other netmask
		17: `tx = 'TEXT 17'`,                                      // case only
		18: `nm = 'N18', c = 'x'`,                                 // name and "char"
		19: `m = 'happy'`,                                         // enum label
		20: `ta = ARRAY['a20', '']`,                               // NULL vs '' inside an array
		21: `pt = point(21, 21)`,                                  // no hash function at all
		22: `ts = ts + interval '1 microsecond'`,                  // timestamp
		23: `by = decode('00', 'hex')`,                            // bytea
		24: `money = money + 1`,                                   // a domain
		25: `tz = tz + interval '1 microsecond', js = '{"g":25}'`, // json text differs by a space
	}
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, `UPDATE things SET f = 0.0 WHERE id = 12`)
		db.Exec(t, `UPDATE things SET iv = interval '24 hours' WHERE id = 13`)
	}
	if got := run(); len(got) != 0 {
		t.Fatalf("after the same update on both sides: %+v", got)
	}
	for id, set := range changes {
		dst.Exec(t, "UPDATE things SET "+set+" WHERE id = $1", id)
	}
	ids := differentKeys(t, run())
	var want []string
	for id := range changes {
		want = append(want, strconv.Itoa(id))
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("different rows %v, want %v", ids, want)
	}
}

// TestOneByteChangesAreFound: a change of one byte in a jsonb, in a text
// stored out of line in TOAST, or in a numeric makes its row differ —
// whatever hashes the row, the comparison is of the values byte for byte.
func TestOneByteChangesAreFound(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	const ddl = `CREATE TABLE docs (id bigint PRIMARY KEY, amount numeric(12,2), attrs jsonb, note text)`
	// One row in 10 has a 3 KiB note of md5 digits, which does not
	// compress: it is stored out of line.
	const fill = `INSERT INTO docs SELECT g, g / 100.0,
			jsonb_build_object('sku', 'SKU-' || g, 'qty', g % 7, 'address', jsonb_build_object('street', md5(g::text), 'zip', lpad(g::text, 5, '0'))),
			CASE WHEN g % 10 = 0 THEN (SELECT string_agg(md5(g || ':' || j), '') FROM generate_series(1, 96) j) ELSE 'note ' || g END
		FROM generate_series(1, 3000) g`
	for _, db := range []*pgtest.DB{src, dst} {
		db.Exec(t, ddl)
		db.Exec(t, fill)
		db.Exec(t, "ANALYZE docs")
	}
	var (
		toast  string
		chunks int64
	)
	if err := dst.Pool.QueryRow(ctx, `SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'docs'::regclass`).Scan(&toast); err != nil {
		t.Fatal(err)
	}
	if err := dst.Pool.QueryRow(ctx, `SELECT count(DISTINCT chunk_id) FROM `+toast).Scan(&chunks); err != nil {
		t.Fatal(err)
	}
	if chunks < 300 {
		t.Fatalf("%d notes stored out of line in %s, want the 300 long ones", chunks, toast)
	}
	run := func() []Mismatch { return wholeTableMismatches(t, src.Pool, dst.Pool, "docs", 1000) }
	if got := run(); len(got) != 0 {
		t.Fatalf("an exact copy: %d mismatches, first %+v", len(got), got[0])
	}
	changes := map[int]string{
		// one character of a string inside a nested object
		101: `attrs = jsonb_set(attrs, '{address,street}', to_jsonb(overlay(attrs #>> '{address,street}' placing 'x' from 17 for 1)))`,
		// one byte in the middle of a TOASTed note
		1500: `note = overlay(note placing 'x' from 1501 for 1)`,
		// one digit of a numeric
		2222: `amount = amount + 0.01`,
	}
	for id, set := range changes {
		tag, err := dst.Pool.Exec(ctx, "UPDATE docs SET "+set+" WHERE id = $1", id)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("update of %d: %v, %d rows", id, err, tag.RowsAffected())
		}
	}
	ids := differentKeys(t, run())
	want := []string{"101", "1500", "2222"}
	if !slices.Equal(ids, want) {
		t.Errorf("different rows %v, want %v", ids, want)
	}
}

// wholeTableMismatches verifies table (keyed by id) over the whole token
// space, in chunks of chunkRows, and returns the keys found different.
func wholeTableMismatches(t *testing.T, src, dst *pgxpool.Pool, table string, chunkRows int) []Mismatch {
	t.Helper()
	ctx := context.Background()
	set, err := tableset.Introspect(ctx, src, tableset.Spec{Name: table, Tables: []tableset.TableSpec{{Table: table, KeyColumn: "id"}}}, "source")
	if err != nil {
		t.Fatal(err)
	}
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	rep, err := Run(ctx, src, dst, Options{Set: set, Ranges: all, ChunkRows: chunkRows, BisectRows: 16, MaxSampleKeys: 100})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Tables[0].AllKeys()
}

// differentKeys returns the sorted keys of got, each of which must be a row
// found different (not missing or extra).
func differentKeys(t *testing.T, got []Mismatch) []string {
	t.Helper()
	var ids []string
	for _, m := range got {
		if m.Kind != Different {
			t.Errorf("%v: kind %s, want %s", m.Key, m.Kind, Different)
		}
		ids = append(ids, m.Key[0])
	}
	slices.Sort(ids)
	return ids
}
