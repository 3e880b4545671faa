package cdc

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/internal/pgtest"
	"github.com/reshard/reshard/tableset"
)

// ValuesSchema is a table of every type whose text form a session setting
// shapes (pgsession.Settings).
const valuesSchema = `CREATE TABLE vals (id bigint PRIMARY KEY, d date, ts timestamptz, tsn timestamp, iv interval,
	f4 real, f8 double precision, b bytea, m money, x xml, a text[], n numeric)`

// valueRows are the rows' values, edge cases of each type, written without
// literals a session's settings parse (xmloption, standard_conforming_strings
// and DateStyle are odd on the writing session too).
var valueRows = []string{
	`make_date(2024, 3, 4), make_timestamptz(2024, 3, 4, 5, 6, 7.123456, 'UTC'), make_timestamp(2024, 3, 4, 5, 6, 7.5),
	 make_interval(1, 2, 0, 3, 4, 5, 6.789), '0.1'::real, '0.30000000000000004'::float8, decode('00ff5c27', 'hex'),
	 12345.67::numeric::money, XMLPARSE(CONTENT '<a>x</a>text'), ARRAY['NULL', NULL, 'a,b', ''], 0.1`,
	`make_date(1999, 12, 31), make_timestamptz(2024, 10, 27, 1, 30, 0, 'Europe/London'), make_timestamp(1999, 12, 31, 23, 59, 59.999999),
	 make_interval(days => 1, hours => -2), '3.4028235e38'::real, '1.7976931348623157e308'::float8, decode('', 'hex'),
	 (-0.01)::numeric::money, XMLPARSE(CONTENT 'only text'), ARRAY[NULL]::text[], -0.000001`,
	`make_date(-44, 3, 15), 'infinity'::timestamptz, '-infinity'::timestamp,
	 make_interval(days => -1, secs => -7384.5), '-0'::real, '-0'::float8, decode('5c78', 'hex'),
	 0::money, XMLPARSE(DOCUMENT '<d/>'), ARRAY['{}', '"', chr(92)], 'NaN'`,
	`make_date(2024, 12, 1), make_timestamptz(2000, 1, 2, 3, 4, 5, 'Asia/Kolkata'), make_timestamp(2000, 2, 29, 0, 0, 0),
	 -make_interval(years => 1, mins => 1), '1.17549435e-38'::real, 'NaN'::float8, decode('00', 'hex'),
	 NULL, NULL, ARRAY['x y'], 1e-20`,
	`make_date(2001, 2, 3), make_timestamptz(2001, 2, 3, 4, 5, 6, 'America/St_Johns'), make_timestamp(2001, 2, 3, 4, 5, 6),
	 make_interval(months => 13, secs => 0.000001), 'NaN'::real, 'Infinity'::float8, decode('ffff', 'hex'),
	 92233720368547758.07::money, NULL, NULL, NULL`,
	`NULL, NULL, NULL, NULL, 'Infinity'::real, '-Infinity'::float8, NULL, NULL, NULL, NULL, NULL`,
	`make_date(2024, 1, 13), make_timestamptz(2024, 1, 13, 12, 0, 0, 'UTC'), make_timestamp(2024, 1, 13, 12, 0, 0),
	 make_interval(secs => -0.5), '1e-45'::real, '5e-324'::float8, NULL, NULL, NULL, NULL, 123456789012345678901234567890.123`,
}

// pinnedText lists "id|row as text" of table vals, read under the pinned
// settings: the text form of every value, byte for byte.
func pinnedText(t testing.TB, dsn string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgsession.ParseConnConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT v.id::text || '|' || v::text FROM vals v ORDER BY v.id")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestValuesArriveUnchanged: a source and a target whose defaults differ
// from PostgreSQL's, and from each other, in every setting that shapes a
// value's text form (DateStyle 'SQL, DMY' against 'Postgres, MDY',
// extra_float_digits 0 against -4, ...). Rows inserted and then updated on
// the source, streamed, staged, and caught up by SQL, arrive with every value
// as the source has it. On 6e755b7 the target's dates swap day and month,
// floats round, and 1.7976931348623157e308 is refused (22003).
func TestValuesArriveUnchanged(t *testing.T) {
	for _, c := range []struct {
		name   string
		staged bool
		peek   peekMode
	}{{"stream", false, streamOnly}, {"staged", true, streamOnly}, {"peek", false, readAhead}} {
		t.Run(c.name, func(t *testing.T) {
			e := &env{src: pgtest.NewDB(t, 0), dst: pgtest.NewDB(t, 1)}
			e.src.Exec(t, valuesSchema)
			e.dst.Exec(t, valuesSchema)
			e.src.SetDefaults(t, pgtest.OddDefaults[0])
			e.dst.SetDefaults(t, pgtest.OddDefaults[1])
			e.src.Pool.Reset() // the writes below run under the odd defaults too
			e.dst.Pool.Reset()
			ctx := context.Background()
			var err error
			if e.set, err = tableset.Introspect(ctx, e.dst.Pool, tableset.Spec{Name: "s", Tables: []tableset.TableSpec{{Table: "vals", KeyColumn: "id"}}}, "target"); err != nil {
				t.Fatal(err)
			}
			if e.names, err = NamesFor("values_" + c.name); err != nil {
				t.Fatal(err)
			}
			if err := CreatePublication(ctx, e.src.Pool, e.names.Publication, e.set, testRanges); err != nil {
				t.Fatal(err)
			}
			forcePeek(e, c.peek)
			e.createSlot(t)
			ids := insideUsers(len(valueRows)*2, 1)
			// Inserts, one transaction per row, then every row in one
			// transaction (the staged path's flush), then updates that set
			// each row's values from another row (all columns sent).
			for i, v := range valueRows {
				e.src.Exec(t, fmt.Sprintf("INSERT INTO vals VALUES (%d, %s)", ids[i], v))
			}
			tx := "BEGIN;"
			for i, v := range valueRows {
				tx += fmt.Sprintf("INSERT INTO vals VALUES (%d, %s);", ids[len(valueRows)+i], v)
			}
			e.src.Exec(t, tx+"COMMIT")
			e.src.Exec(t, `UPDATE vals v SET d = w.d, ts = w.ts, tsn = w.tsn, iv = w.iv, f4 = w.f4, f8 = w.f8, b = w.b, m = w.m, x = w.x, a = w.a, n = w.n
				FROM vals w WHERE w.id = (SELECT min(id) FROM vals WHERE id > v.id) AND v.id = ANY($1)`, ids[len(valueRows):len(valueRows)+3])
			o := e.options()
			if c.staged {
				o.StageMinRows = 1
			}
			s, err := New(o)
			if err != nil {
				t.Fatal(err)
			}
			stop := runStream(t, s)
			drain(t, e, s)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			src, dst := pinnedText(t, e.src.DSN), pinnedText(t, e.dst.DSN)
			if len(src) != 2*len(valueRows) {
				t.Fatalf("the source has %d rows, want %d", len(src), 2*len(valueRows))
			}
			if !slices.Equal(src, dst) {
				for i := range max(len(src), len(dst)) {
					var a, b string
					if i < len(src) {
						a = src[i]
					}
					if i < len(dst) {
						b = dst[i]
					}
					if a != b {
						t.Errorf("row differs:\n source %s\n target %s", a, b)
					}
				}
			}
			if c.peek != streamOnly && peeks(t, s) < 1 {
				t.Error("the stream never caught up by SQL: the peek's values went untested")
			}
		})
	}
}
