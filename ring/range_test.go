package ring

import (
	"math"
	"strings"
	"testing"
)

func TestRangeContains(t *testing.T) {
	tests := []struct {
		r    Range
		tok  int64
		want bool
	}{
		{Range{0, 10}, 0, false}, // lower bound exclusive
		{Range{0, 10}, 1, true},
		{Range{0, 10}, 10, true}, // upper bound inclusive
		{Range{0, 10}, 11, false},
		{Range{MinToken, -5}, MinToken, true}, // the wrap's low half includes MinToken
		{Range{MinToken, -5}, -5, true},
		{Range{MinToken, -5}, -4, false},
		{Range{100, MaxToken}, MaxToken, true},
		{Range{100, MaxToken}, 100, false},
		{Range{MaxToken - 1, MaxToken}, MaxToken, true},
	}
	for _, tt := range tests {
		if got := tt.r.Contains(tt.tok); got != tt.want {
			t.Errorf("%v.Contains(%d) = %v, want %v", tt.r, tt.tok, got, tt.want)
		}
	}
}

func TestNormalizeMergesTouching(t *testing.T) {
	got := Normalize([]Range{{20, 30}, {0, 10}, {10, 20}, {5, 5}, {40, 50}})
	want := []Range{{0, 30}, {40, 50}}
	if len(got) != len(want) {
		t.Fatalf("Normalize = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Normalize = %v, want %v", got, want)
		}
	}
}

func TestPredicate(t *testing.T) {
	e := "tok"
	tests := []struct {
		rs   []Range
		want string
	}{
		{nil, "false"},
		{[]Range{{0, 10}}, "(tok > 0 AND tok <= 10)"},
		{[]Range{{MinToken, -3}}, "tok <= -3"},
		{[]Range{{7, MaxToken}}, "tok > 7"},
		{[]Range{{MinToken, MaxToken}}, "true"},
		{[]Range{{7, MaxToken}, {MinToken, -3}}, "(tok <= -3 OR tok > 7)"},
	}
	for _, tt := range tests {
		if got := Predicate(e, tt.rs); got != tt.want {
			t.Errorf("Predicate(%v) = %q, want %q", tt.rs, got, tt.want)
		}
	}
}

func TestParseRange(t *testing.T) {
	r, err := ParseRange("-5:10")
	if err != nil || r != (Range{-5, 10}) {
		t.Fatalf("ParseRange = %v, %v", r, err)
	}
	for _, bad := range []string{"10:-5", "5:5", "x:1", "12"} {
		if _, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) accepted a bad range", bad)
		}
	}
	// A bound outside int64 says what a token can be.
	if _, err := ParseRange("0:9223372036854775808"); err == nil || !strings.Contains(err.Error(), "tokens are int64, -9223372036854775808 to 9223372036854775807") {
		t.Errorf("ParseRange past MaxToken: %v", err)
	}
}

func TestTokenSQLQuotes(t *testing.T) {
	if got := TokenSQL(KeyInt, "s", `user"id`); got != `hashint8extended("s"."user""id", 0)` {
		t.Fatalf("TokenSQL = %s", got)
	}
	if got := TokenSQL(KeyText, "", "k"); got != `hashtextextended("k", 0)` {
		t.Fatalf("TokenSQL = %s", got)
	}
}

func TestSpaceFraction(t *testing.T) {
	for _, c := range []struct {
		rs   []Range
		want float64
	}{
		{nil, 0},
		{[]Range{{MinToken, MaxToken}}, 1},
		{[]Range{{MinToken, -1}}, 0.5},
		{[]Range{{MinToken, MinToken / 3}, {MaxToken / 3, MaxToken}}, 2.0 / 3}, // 12297829382473033728 tokens
	} {
		if got := SpaceFraction(c.rs); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("SpaceFraction(%v) = %v, want %v", c.rs, got, c.want)
		}
	}
}
