package ring

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// ParseRange reads back what String prints (the CLI prints ranges so, and
// --range refused them on main) as well as lo:hi.
func TestParseRangeReadsWhatStringPrints(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	ranges := []Range{{MinToken, 0}, {0, MaxToken}, {MinToken, MaxToken}, {-5, 7}}
	for range 1000 {
		a, b := int64(rnd.Uint64()), int64(rnd.Uint64())
		if a > b {
			a, b = b, a
		}
		if a < b {
			ranges = append(ranges, Range{a, b})
		}
	}
	for _, r := range ranges {
		for _, s := range []string{r.String(), " " + r.String() + " ", strings.Replace(r.String(), ",", ", ", 1)} {
			got, err := ParseRange(s)
			if err != nil || got != r {
				t.Fatalf("ParseRange(%q) = %v, %v; want %v", s, got, err, r)
			}
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"(1,5)", "the upper bound is inclusive"},
		{"[1,5]", "the lower bound is exclusive: write (1,5]"},
		{"(5,1]", "lower bound must be below upper bound"},
		{"(1;5]", "want lo:hi or (lo,hi]"},
		{"(x,5]", "lower bound"},
	} {
		if _, err := ParseRange(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRange(%q): %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}
