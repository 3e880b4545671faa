package backfill

import (
	"bytes"
	"encoding/binary"
	"math/big"
	"strings"
	"testing"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// copyStream builds a binary COPY stream of tuples (nil = NULL).
func copyStream(tuples ...[][]byte) []byte {
	b := append([]byte{}, copySignature...)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0)
	for _, t := range tuples {
		b = binary.BigEndian.AppendUint16(b, uint16(len(t)))
		for _, f := range t {
			if f == nil {
				b = binary.BigEndian.AppendUint32(b, 0xffffffff)
				continue
			}
			b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
			b = append(b, f...)
		}
	}
	return append(b, 0xff, 0xff)
}

func TestSplitChunk(t *testing.T) {
	in := copyStream(
		[][]byte{[]byte("a"), nil, []byte("7")},
		[][]byte{[]byte(""), []byte("xyz"), []byte("8")},
	)
	c, err := splitChunk(in, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := copyStream([][]byte{[]byte("a"), nil}, [][]byte{[]byte(""), []byte("xyz")})
	if c.rows != 2 || !bytes.Equal(c.data, want) || len(c.extras) != 1 || string(c.extras[0]) != "8" {
		t.Fatalf("rows %d extras %q data %q", c.rows, c.extras, c.data)
	}
	// The reader reads the next chunk into the same buffer while the
	// writer sends this one: the rows are in a slice of their own.
	clear(in)
	if !bytes.Equal(c.data, want) {
		t.Fatalf("the chunk's rows changed with the buffer they were read from: %q", c.data)
	}
	if c, err := splitChunk(copyStream(), 2, 1); err != nil || c.rows != 0 || c.extras != nil {
		t.Fatalf("empty stream: %+v %v", c, err)
	}
	for _, bad := range [][]byte{in[:len(in)-1], in[:30], []byte("PGCOPY"), copyStream([][]byte{[]byte("a")})} {
		if _, err := splitChunk(bad, 2, 1); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzSplitChunk(f *testing.F) {
	f.Add(copyStream([][]byte{[]byte("a"), nil, []byte("7")}))
	f.Add(copyStream())
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := splitChunk(in, 2, 1)
		if err == nil && c.rows > 0 {
			// What it keeps parses again, with no extras.
			again, err := splitChunk(c.data, 2, 0)
			if err != nil || again.rows != c.rows {
				t.Fatalf("re-split: %v rows %d vs %d", err, again.rows, c.rows)
			}
		}
	})
}

func TestQuoteLiteral(t *testing.T) {
	for in, want := range map[string]string{`a`: `'a'`, `O'Brien`: `'O''Brien'`, `a\b`: `E'a\\b'`, `'\`: `E'''\\'`} {
		if got := quoteLiteral(in); got != want {
			t.Errorf("quoteLiteral(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSplitRangeCoversExactly(t *testing.T) {
	for _, r := range []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}, {Lo: -10, Hi: 10}, {Lo: 5, Hi: 6}, {Lo: ring.MinToken, Hi: ring.MinToken + 3}} {
		for _, n := range []int{1, 2, 3, 7} {
			parts := splitRange(r, n)
			sum := new(big.Float)
			for i, p := range parts {
				if !p.Valid() || (i > 0 && p.Lo != parts[i-1].Hi) {
					t.Fatalf("%s/%d: %v", r, n, parts)
				}
				sum.Add(sum, big.NewFloat(p.Width()))
			}
			if parts[0].Lo != r.Lo || parts[len(parts)-1].Hi != r.Hi || !ring.ContainsAny(parts, r.Hi) {
				t.Fatalf("%s/%d: %v", r, n, parts)
			}
		}
	}
}

func TestChunkSQL(t *testing.T) {
	tb := tableset.Table{Schema: "public", Name: "orders", KeyColumn: "user_id", KeyType: ring.KeyInt, PK: []string{"id", "k"},
		Columns: []tableset.Column{{Name: "id", Type: "bigint"}, {Name: "user_id", Type: "bigint"}, {Name: "k", Type: "text"}, {Name: "g", Type: "int", Generated: true}}}
	r := ring.Range{Lo: -5, Hi: 9}
	first := chunkSQL(tb, []ring.Range{r}, OrderPK, position{}, 100)
	if want := `COPY (SELECT "id", "user_id", "k", "id"::text AS "reshard_extra_0", "k"::text AS "reshard_extra_1" FROM "public"."orders" WHERE (hashint8extended("user_id", 0) > -5 AND hashint8extended("user_id", 0) <= 9) ORDER BY "id", "k" LIMIT 100) TO STDOUT (FORMAT binary)`; first != want {
		t.Fatalf("got  %s\nwant %s", first, want)
	}
	next := chunkSQL(tb, []ring.Range{r}, OrderToken, position{token: 3, pk: []string{"42", `it's`}}, 100)
	for _, part := range []string{
		`hashint8extended("user_id", 0) AS "reshard_extra_0"`,
		`hashint8extended("user_id", 0) >= 3 AND (hashint8extended("user_id", 0) > 3 OR ("id", "k") > ('42'::bigint, 'it''s'::text))`,
		`ORDER BY hashint8extended("user_id", 0), "id", "k"`,
	} {
		if !strings.Contains(next, part) {
			t.Fatalf("%s\nlacks %s", next, part)
		}
	}
	// Several ranges paged by primary key: one scan, one binary search per row.
	many := chunkSQL(tb, []ring.Range{{Lo: ring.MinToken, Hi: -100}, r}, OrderPK, position{}, 100)
	if !strings.Contains(many, `WHERE width_bucket(hashint8extended("user_id", 0), '{-9223372036854775808,-99,-4,10}'::bigint[]) % 2 = 1 ORDER BY "id", "k"`) {
		t.Fatalf("two ranges: %s", many)
	}
	up := upsertSQL(tb, []ring.Range{r})
	if !strings.Contains(up, `ON CONFLICT ("id", "k") DO UPDATE SET "user_id" = EXCLUDED."user_id" WHERE (hashint8extended("x"."user_id", 0) > -5`) || strings.Contains(up, `"g"`) {
		t.Fatalf("upsert %s", up)
	}
}
