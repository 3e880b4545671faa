package cdc

import (
	"context"
	"fmt"
	"testing"

	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

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
			e.src.Exec(t, pgtest.ValuesTable("vals", "id"))
			e.dst.Exec(t, pgtest.ValuesTable("vals", "id"))
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
			ids := insideUsers(len(pgtest.ValueRows)*2, 1)
			// Inserts, one transaction per row, then every row in one
			// transaction (the staged path's flush), then updates that set
			// each row's values from another row (all columns sent).
			for i, v := range pgtest.ValueRows {
				e.src.Exec(t, fmt.Sprintf("INSERT INTO vals VALUES (%d, %s)", ids[i], v))
			}
			tx := "BEGIN;"
			for i, v := range pgtest.ValueRows {
				tx += fmt.Sprintf("INSERT INTO vals VALUES (%d, %s);", ids[len(pgtest.ValueRows)+i], v)
			}
			e.src.Exec(t, tx+"COMMIT")
			e.src.Exec(t, `UPDATE vals v SET (`+pgtest.ValuesColumns+`) = (SELECT `+pgtest.ValuesColumns+` FROM vals w
				WHERE w.id = (SELECT min(x.id) FROM vals x WHERE x.id > v.id)) WHERE v.id = ANY($1)`, ids[len(pgtest.ValueRows):len(pgtest.ValueRows)+3])
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
			src, dst := e.src.RowsAsText(t, "vals", "id"), e.dst.RowsAsText(t, "vals", "id")
			if len(src) != 2*len(pgtest.ValueRows) {
				t.Fatalf("the source has %d rows, want %d", len(src), 2*len(pgtest.ValueRows))
			}
			pgtest.DiffRows(t, "target", src, dst)
			if c.peek != streamOnly && peeks(t, s) < 1 {
				t.Error("the stream never caught up by SQL: the peek's values went untested")
			}
		})
	}
}
