package ring

import (
	"context"
	"encoding/json"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var updateVectors = flag.Bool("update", false, "regenerate testdata/tokens.json from a real PostgreSQL server")

// vectorKeys are the keys of testdata/tokens.json: edges of every tail length
// of lookup3 (0..11 bytes past a 12-byte block), integer widths and signs,
// multi-byte UTF-8 and long strings.
func vectorKeys() map[KeyType][]string {
	ints := []int64{0, 1, -1, 2, -2, 42, 1000, -1000, math.MaxInt16, math.MinInt16,
		math.MaxInt32, math.MinInt32, math.MaxInt32 + 1, math.MinInt32 - 1,
		math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1,
		1 << 32, -(1 << 32), 1<<32 + 1, 0x0123456789abcdef, -0x0123456789abcdef}
	var is []string
	for _, v := range ints {
		is = append(is, strconv.FormatInt(v, 10))
	}
	ts := []string{"", "a", "abc", "key-0", "key-1", "user:42", "é", "中文", "🙂", "naïve café", "a#0", "shard-0#0"}
	for n := 1; n <= 25; n++ {
		ts = append(ts, strings.Repeat("x", n)[:n-1]+string(rune('a'+n%26)))
	}
	ts = append(ts, strings.Repeat("long key ", 200), strings.Repeat("é中🙂", 100))
	us := []string{
		"00000000-0000-0000-0000-000000000000",
		"ffffffff-ffff-ffff-ffff-ffffffffffff",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"123e4567-e89b-12d3-a456-426614174000",
		"00000000-0000-0000-0000-000000000001",
		"80000000-0000-0000-0000-000000000000",
	}
	return map[KeyType][]string{KeyInt: is, KeyText: ts, KeyUUID: us}
}

type vector struct {
	Key   string `json:"key"`
	Token int64  `json:"token"`
}

// sqlTokens computes the tokens of keys (in text form) on the server, in one
// query per call.
func sqlTokens(t testing.TB, db *pgtest.DB, kt KeyType, keys []string) []int64 {
	t.Helper()
	var expr string
	switch kt {
	case KeyInt:
		expr = "hashint8extended(k::int8, 0)"
	case KeyText:
		expr = "hashtextextended(k, 0)"
	case KeyUUID:
		expr = "uuid_hash_extended(k::uuid, 0)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []int64
	q := "SELECT coalesce(array_agg(" + expr + " ORDER BY i), '{}') FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i)"
	if err := db.Pool.QueryRow(ctx, q, keys).Scan(&out); err != nil {
		t.Fatalf("tokens of %d %s keys: %v", len(keys), kt, err)
	}
	if len(out) != len(keys) {
		t.Fatalf("server returned %d tokens for %d keys", len(out), len(keys))
	}
	return out
}

func newUTF8DB(t *testing.T) *pgtest.DB {
	db := pgtest.NewDB(t, 0)
	var enc string
	if err := db.Pool.QueryRow(context.Background(), "SHOW server_encoding").Scan(&enc); err != nil {
		t.Fatal(err)
	}
	if enc != "UTF8" {
		t.Fatalf("server encoding %s: the token of a text key is defined on its UTF-8 bytes", enc)
	}
	return db
}

// TestWriteVectors regenerates testdata/tokens.json (go test ./ring -run TestWriteVectors -update).
func TestWriteVectors(t *testing.T) {
	if !*updateVectors {
		t.Skip("run with -update to regenerate testdata/tokens.json")
	}
	db := newUTF8DB(t)
	out := map[KeyType][]vector{}
	for kt, keys := range vectorKeys() {
		for i, tok := range sqlTokens(t, db, kt, keys) {
			out[kt] = append(out[kt], vector{keys[i], tok})
		}
	}
	var v string
	if err := db.Pool.QueryRow(context.Background(), "SELECT version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(struct {
		Server  string               `json:"server"`
		Vectors map[KeyType][]vector `json:"vectors"`
	}{v, out}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("testdata/tokens.json", append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// randomKeys returns n keys of type kt in text form, deterministic for seed,
// weighted towards the edges.
func randomKeys(kt KeyType, n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	keys := make([]string, 0, n)
	for _, k := range vectorKeys()[kt] {
		keys = append(keys, k)
	}
	runes := []rune("abcxyzABC019 -_#:/é中文🙂ßøΩж\u00a0\u200d\U0010FFFD")
	for len(keys) < n {
		switch kt {
		case KeyInt:
			var v int64
			switch r.IntN(5) {
			case 0:
				v = int64(r.Int32()) - int64(r.Int32()) // int32-ish, both signs
			case 1:
				v = r.Int64N(2000) - 1000
			case 2:
				v = math.MaxInt64 - r.Int64N(1000)
			case 3:
				v = math.MinInt64 + r.Int64N(1000)
			default:
				v = int64(r.Uint64())
			}
			keys = append(keys, strconv.FormatInt(v, 10))
		case KeyText:
			var ln int
			switch r.IntN(100) {
			case 0:
				ln = 1025 + r.IntN(3000) // long
			case 1, 2, 3:
				ln = 0
			default:
				ln = r.IntN(40)
			}
			var b strings.Builder
			ascii := r.IntN(2) == 0
			for b.Len() < ln {
				if ascii {
					b.WriteByte(byte(0x20 + r.IntN(0x5f)))
				} else {
					b.WriteRune(runes[r.IntN(len(runes))])
				}
			}
			keys = append(keys, b.String())
		case KeyUUID:
			var u [16]byte
			for i := range u {
				u[i] = byte(r.Uint32())
			}
			keys = append(keys, FormatUUID(u))
		}
	}
	return keys
}

// TestTokensMatchPostgres compares Go with SQL on 100k random keys of each type.
func TestTokensMatchPostgres(t *testing.T) {
	db := newUTF8DB(t)
	const n = 100_000
	for i, kt := range []KeyType{KeyInt, KeyText, KeyUUID} {
		keys := randomKeys(kt, n, uint64(i+1))
		want := sqlTokens(t, db, kt, keys)
		bad := 0
		for j, k := range keys {
			got, err := TokenOf(kt, k)
			if err != nil {
				t.Fatalf("TokenOf(%s, %q): %v", kt, k, err)
			}
			if got != want[j] {
				if bad++; bad <= 5 {
					t.Errorf("%s key %q: Go token %d, PostgreSQL %d", kt, trunc(k), got, want[j])
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d keys differ", kt, bad, len(keys))
		}
	}
}

// TestTokenInt32Widths checks that integer and smallint keys hash like bigint
// ones: hashint4extended and hashint2extended agree with TokenInt64.
func TestTokenInt32Widths(t *testing.T) {
	db := newUTF8DB(t)
	r := rand.New(rand.NewPCG(7, 7))
	keys := []int32{0, 1, -1, math.MaxInt32, math.MinInt32, math.MaxInt16, math.MinInt16}
	for len(keys) < 20_000 {
		keys = append(keys, r.Int32()-r.Int32())
	}
	var h4 []int64
	var h2 []*int64
	err := db.Pool.QueryRow(context.Background(), `
		SELECT array_agg(hashint4extended(k, 0) ORDER BY i),
		       array_agg(CASE WHEN k BETWEEN -32768 AND 32767 THEN hashint2extended(k::int2, 0) END ORDER BY i)
		FROM unnest($1::int4[]) WITH ORDINALITY AS u(k, i)`, keys).Scan(&h4, &h2)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got := TokenInt64(int64(k)); got != h4[i] {
			t.Errorf("TokenInt64(%d) = %d, hashint4extended = %d", k, got, h4[i])
		}
	}
	n2 := 0
	for i, k := range keys {
		if h2[i] == nil { // outside the smallint range
			continue
		}
		n2++
		if TokenInt64(int64(k)) != *h2[i] {
			t.Errorf("TokenInt64(%d) = %d, hashint2extended = %d", k, TokenInt64(int64(k)), *h2[i])
		}
	}
	if n2 < 5 {
		t.Fatalf("only %d smallint keys compared", n2)
	}
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "…(" + strconv.Itoa(len(s)) + " bytes)"
	}
	return s
}

// TestBucketsMatchContains: PostgreSQL's width_bucket over Buckets puts every
// token in an odd bucket exactly when Go's Contains does, and in the bucket
// of the right normalized range: random range sets, and ranges at both ends
// of the token space, probed at and around every bound.
func TestBucketsMatchContains(t *testing.T) {
	db := pgtest.NewDB(t, 0)
	rng := rand.New(rand.NewPCG(7, 7))
	sets := [][]Range{
		{{Lo: MinToken, Hi: MaxToken}},
		{{Lo: MinToken, Hi: -5}, {Lo: 10, Hi: MaxToken}},
		{{Lo: -5, Hi: 10}, {Lo: 10, Hi: 20}}, // touching: merged
		{{Lo: MaxToken - 1, Hi: MaxToken}, {Lo: MinToken, Hi: MinToken + 1}},
	}
	for range 20 {
		var rs []Range
		for range 1 + rng.IntN(40) {
			a, b := int64(rng.Uint64()), int64(rng.Uint64())
			rs = append(rs, Range{Lo: min(a, b), Hi: max(a, b)})
		}
		sets = append(sets, rs)
	}
	for _, rs := range sets {
		norm := Normalize(rs)
		probes := []int64{MinToken, MinToken + 1, -1, 0, 1, MaxToken - 1, MaxToken}
		for _, r := range norm {
			for _, d := range []int64{-1, 0, 1} {
				if r.Lo+d >= r.Lo || r.Lo != MinToken {
					probes = append(probes, r.Lo+d)
				}
				if r.Hi+d <= r.Hi || r.Hi != MaxToken {
					probes = append(probes, r.Hi+d)
				}
			}
		}
		for range 200 {
			probes = append(probes, int64(rng.Uint64()))
		}
		// Read every row first: a failure with the rows open would leave
		// the connection busy and the test's cleanup waiting for it.
		var got []struct {
			P int64
			B int
		}
		rows, err := db.Pool.Query(context.Background(), "SELECT p, width_bucket(p, "+Buckets(rs)+") FROM unnest($1::bigint[]) p", probes)
		if err == nil {
			got, err = pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
				P int64
				B int
			}])
		}
		if err != nil || len(got) != len(probes) {
			t.Fatalf("%d of %d probes: %v", len(got), len(probes), err)
		}
		for _, g := range got {
			want := -1
			for i, r := range norm {
				if r.Contains(g.P) {
					want = i
				}
			}
			in := -1
			if g.B%2 == 1 {
				in = (g.B - 1) / 2
			}
			if in != want {
				t.Fatalf("ranges %v: token %d in bucket %d (range %d), Contains says range %d", norm, g.P, g.B, in, want)
			}
		}
	}
}
