package ring

import (
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTokenVectors checks the Go token functions against tokens computed by a
// real PostgreSQL 15 server (testdata/tokens.json, regenerated with
// go test ./ring -run TestWriteVectors -update).
func TestTokenVectors(t *testing.T) {
	b, err := os.ReadFile("testdata/tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Server  string               `json:"server"`
		Vectors map[KeyType][]vector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.Server, "PostgreSQL 15") {
		t.Fatalf("vectors come from %q, want PostgreSQL 15", f.Server)
	}
	n := 0
	for _, kt := range []KeyType{KeyInt, KeyText, KeyUUID} {
		vs := f.Vectors[kt]
		if len(vs) < 5 {
			t.Fatalf("only %d %s vectors", len(vs), kt)
		}
		for _, v := range vs {
			got, err := TokenOf(kt, v.Key)
			if err != nil {
				t.Errorf("TokenOf(%s, %q): %v", kt, trunc(v.Key), err)
				continue
			}
			if got != v.Token {
				t.Errorf("TokenOf(%s, %q) = %d, PostgreSQL says %d", kt, trunc(v.Key), got, v.Token)
			}
			n++
		}
	}
	t.Logf("%d vectors from %s", n, f.Server)
}

func TestTokenDirect(t *testing.T) {
	// Spot values from testdata/tokens.json through the typed functions.
	if got := TokenInt64(42); got != 8010225493015854792 {
		t.Errorf("TokenInt64(42) = %d", got)
	}
	u, _ := ParseUUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
	if TokenUUID(u) != mustTokenOf(t, KeyUUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11") {
		t.Error("TokenUUID and TokenOf disagree")
	}
	// The string and byte implementations of lookup3 must agree.
	for n := 0; n < 40; n++ {
		s := strings.Repeat("é1", n)[:n]
		if uint64(TokenText(s)) != hashBytesExtended([]byte(s)) {
			t.Errorf("len %d: string and byte hashes differ", n)
		}
	}
}

func mustTokenOf(t *testing.T, kt KeyType, s string) int64 {
	t.Helper()
	v, err := TokenOf(kt, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTokenOfErrors(t *testing.T) {
	for _, c := range []struct {
		kt KeyType
		s  string
	}{
		{KeyInt, ""}, {KeyInt, "1.5"}, {KeyInt, "9223372036854775808"}, {KeyInt, "abc"},
		{KeyUUID, ""}, {KeyUUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1"}, {KeyUUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11x"},
		{KeyUUID, "g0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"}, {KeyUUID, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{KeyType("float"), "1"},
	} {
		if _, err := TokenOf(c.kt, c.s); err == nil {
			t.Errorf("TokenOf(%s, %q) accepted bad input", c.kt, c.s)
		}
	}
}

func TestParseUUIDForms(t *testing.T) {
	want, err := ParseUUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
	if err != nil {
		t.Fatal(err)
	}
	// The input forms PostgreSQL's uuid_in documents.
	for _, s := range []string{
		"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
		"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
		"a0eebc999c0b4ef8bb6d6bb9bd380a11",
		"a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11",
		"{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}",
	} {
		got, err := ParseUUID(s)
		if err != nil || got != want {
			t.Errorf("ParseUUID(%q) = %x, %v; want %x", s, got, err, want)
		}
	}
	if FormatUUID(want) != "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" {
		t.Errorf("FormatUUID = %s", FormatUUID(want))
	}
}

func TestTokenIntFolding(t *testing.T) {
	// hashint8extended folds the high half so that equal values of
	// different integer widths share a token; the fold must not make
	// distinct small values collide.
	seen := map[int64]int64{}
	for _, k := range []int64{-3, -2, -1, 0, 1, 2, 3, math.MinInt32, math.MaxInt32} {
		tok := TokenInt64(k)
		if prev, ok := seen[tok]; ok {
			t.Errorf("TokenInt64(%d) == TokenInt64(%d)", k, prev)
		}
		seen[tok] = k
	}
}

func FuzzTokenText(f *testing.F) {
	for _, s := range vectorKeys()[KeyText] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := TokenText(s)
		if uint64(tok) != hashBytesExtended([]byte(s)) {
			t.Fatalf("string and byte lookup3 differ on %q", s)
		}
		if got, err := TokenOf(KeyText, s); err != nil || got != tok {
			t.Fatalf("TokenOf(text, %q) = %d, %v; want %d", s, got, err, tok)
		}
		if !utf8.ValidString(s) {
			return
		}
		// A token always lies in the ring: exactly one range owns it.
		r := MustNew([]VNode{{-5, "a"}, {tok | 1, "b"}, {MaxToken, "c"}})
		owners := 0
		for _, or := range r.AllRanges() {
			if or.Range.Contains(tok) {
				owners++
			}
		}
		if owners != 1 {
			t.Fatalf("token %d lies in %d ranges", tok, owners)
		}
	})
}

func FuzzTokenOfInt(f *testing.F) {
	for _, s := range vectorKeys()[KeyInt] {
		f.Add(s)
	}
	f.Add("+7")
	f.Add("-0")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := TokenOf(KeyInt, s)
		if err != nil {
			return
		}
		// Small values fit every width: the fold must make the int64
		// token equal to the token of its 32-bit form.
		v := mustParseInt(t, s)
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			lo := uint32(int32(v))
			if uint64(tok) != hashUint32Extended(lo) {
				t.Fatalf("TokenInt64(%d) is not hash_uint32_extended of its int32 form", v)
			}
		}
	})
}

func FuzzTokenOfUUID(f *testing.F) {
	for _, s := range vectorKeys()[KeyUUID] {
		f.Add(s)
	}
	f.Add("{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUUID(s)
		if err != nil {
			return
		}
		// Whatever form was accepted, the canonical form has the same token.
		a, _ := TokenOf(KeyUUID, s)
		b, err := TokenOf(KeyUUID, FormatUUID(u))
		if err != nil || a != b {
			t.Fatalf("uuid %q: token %d, canonical form %d (%v)", s, a, b, err)
		}
	})
}

func mustParseInt(t *testing.T, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
