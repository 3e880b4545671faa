package verify

import (
	"math/big"
	"slices"
	"testing"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

func orders() tableset.Table {
	return tableset.Table{Schema: "public", Name: "Orders", KeyColumn: "user_id", KeyType: ring.KeyInt, PK: []string{"user_id", "id"},
		Columns: []tableset.Column{{Name: "id", Type: "bigint", TypeOID: 20}, {Name: "user_id", Type: "integer", TypeOID: 23},
			{Name: "note", Type: "character varying(20)", TypeOID: 1043}, {Name: "total", Type: "numeric(12,2)", TypeOID: 1700}}}
}

func TestWhere(t *testing.T) {
	one := orders()
	one.PK = []string{"id"}
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	two := []ring.Range{{Lo: 10, Hi: 20}, {Lo: ring.MinToken, Hi: -5}}
	for _, tc := range []struct {
		name   string
		t      tableset.Table
		ranges []ring.Range
		lo, hi []string
		want   string
		args   []any
	}{
		{"open both ends, every token", one, all, nil, nil, "true", nil},
		{"single key, both bounds", one, all, []string{"7"}, []string{"9"},
			`"t"."id" > CAST($1::text AS bigint) AND "t"."id" <= CAST($2::text AS bigint) AND true`, []any{"7", "9"}},
		{"composite key, upper bound only, two ranges", orders(), two, nil, []string{"3", "4"},
			`("t"."user_id", "t"."id") <= (CAST($1::text AS integer), CAST($2::text AS bigint)) AND ` +
				`width_bucket(hashint8extended("t"."user_id", 0), '{-9223372036854775808,-4,11,21}'::bigint[]) % 2 = 1`,
			[]any{"3", "4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := newTableSQL(tc.t, tc.ranges)
			if err != nil {
				t.Fatal(err)
			}
			got, args := q.where(tc.lo, tc.hi)
			if got != tc.want || !slices.Equal(args, tc.args) {
				t.Errorf("where:\n got %s %v\nwant %s %v", got, args, tc.want, tc.args)
			}
		})
	}
}

func TestRowHashAndRanges(t *testing.T) {
	q, err := newTableSQL(orders(), []ring.Range{{Lo: 10, Hi: 20}, {Lo: ring.MinToken, Hi: -5}})
	if err != nil {
		t.Fatal(err)
	}
	// Columns by name in source order; text under "C"; numeric (1.5 = 1.50)
	// as text.
	if want := `hash_record_extended(ROW("t"."id", "t"."user_id", "t"."note" COLLATE "C", ("t"."total"::text COLLATE "C")), 0)`; q.rowHash != want {
		t.Errorf("row hash %s, want %s", q.rowHash, want)
	}
	if q.from != `"public"."Orders" AS t` {
		t.Errorf("from %s", q.from)
	}
	// Normalized: the range holding MinToken comes first.
	for tok, want := range map[int64]int{ring.MinToken: 0, -5: 0, -4: -1, 10: -1, 11: 1, 20: 1, 21: -1} {
		if got := q.rangeIndex(tok); got != want {
			t.Errorf("rangeIndex(%d) = %d, want %d", tok, got, want)
		}
	}
	if f := q.fraction(); f < 0.5 || f > 0.51 {
		t.Errorf("fraction %v, want just over 0.5", f)
	}
	if _, err := newTableSQL(orders(), nil); err == nil {
		t.Error("no ranges accepted")
	}
}

func TestChunksCoverTheKeySpace(t *testing.T) {
	cs := chunksOf(3, [][]string{{"10"}, {"20"}})
	want := []chunk{{table: 3, index: 0, hi: []string{"10"}}, {table: 3, index: 1, lo: []string{"10"}, hi: []string{"20"}}, {table: 3, index: 2, lo: []string{"20"}}}
	if len(cs) != len(want) {
		t.Fatalf("got %+v", cs)
	}
	for i := range cs {
		if cs[i].index != want[i].index || cs[i].table != 3 || !slices.Equal(cs[i].lo, want[i].lo) || !slices.Equal(cs[i].hi, want[i].hi) ||
			(cs[i].lo == nil) != (want[i].lo == nil) || (cs[i].hi == nil) != (want[i].hi == nil) {
			t.Errorf("chunk %d: got %+v, want %+v", i, cs[i], want[i])
		}
	}
	if one := chunksOf(0, nil); len(one) != 1 || one[0].lo != nil || one[0].hi != nil {
		t.Errorf("no bounds: %+v", one)
	}
}

func TestDigestHalves(t *testing.T) {
	mk := func(n, x, s int64) *digest { d := &digest{n: n, x: x}; d.s.Set(big.NewInt(s)); return d }
	left, right := mk(3, 0x5a, -7), mk(4, 0x0f, 1<<62)
	whole := &digest{}
	whole.add(left)
	whole.add(right)
	if got := whole.minus(left); !got.equal(right) {
		t.Errorf("whole - left = %v, want %v", got, right)
	}
	if whole.equal(mk(7, 0x5a^0x0f, -7+1<<62+1)) {
		t.Error("digests differing only in the sum compare equal")
	}
}
