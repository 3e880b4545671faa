package eta

import (
	"math"
	"testing"
	"time"
)

func TestRateTime(t *testing.T) {
	for _, tc := range []struct {
		name       string
		r          Rate
		rows, byts int64
		want       time.Duration
		ok         bool
	}{
		{"rows bind", Rate{Rows: 100, Bytes: 1e6}, 1000, 1e6, 10 * time.Second, true},
		{"bytes bind", Rate{Rows: 1000, Bytes: 100}, 1000, 1000, 10 * time.Second, true},
		{"nothing left", Rate{}, 0, 0, 0, true},
		{"rows left at no rate", Rate{Bytes: 100}, 1, 0, 0, false},
		{"bytes left at no rate", Rate{Rows: 100}, 0, 1, 0, false},
		{"overflow", Rate{Rows: 1e-9}, math.MaxInt64, 0, 0, false},
	} {
		got, ok := tc.r.Time(tc.rows, tc.byts)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %s %v, want %s %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// AtLimit reads a 0 limit as unlimited, where Time reads a 0 rate as a
// stall.
func TestAtLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		limit      Rate
		rows, byts int64
		want       time.Duration
	}{
		{"unlimited", Rate{}, 1e6, 1e9, 0},
		{"rows limit", Rate{Rows: 1000}, 5000, 1e9, 5 * time.Second},
		{"bytes limit", Rate{Bytes: 1e6}, 5000, 3e6, 3 * time.Second},
		{"both, the longer", Rate{Rows: 1000, Bytes: 1e6}, 5000, 3e6, 5 * time.Second},
		{"overflow", Rate{Rows: 1e-9}, math.MaxInt64, 0, 0},
	} {
		if got := AtLimit(tc.limit, tc.rows, tc.byts); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// Copies into one target share it: each goes at an equal share of the
// rate they make together, and a copy that ends hands its share to the
// others.
func TestShared(t *testing.T) {
	at := time.Unix(1000, 0)
	secs := func(end time.Time, ok bool) float64 {
		t.Helper()
		if !ok {
			t.Fatal("no estimate")
		}
		return end.Sub(at).Seconds()
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: %.3f s, want %.3f", what, got, want)
		}
	}
	own := Pace{At: at, Left: 93_000}
	near("alone", secs(Shared(own, nil, 40_000)), 93_000.0/40_000)
	// The demo's first move, 93k rows left, when three more with 150k each
	// copy beside it at 40k rows/s in all: all four share the 40k, and it
	// ends first, at 4 × 93k / 40k.
	peers := []Pace{{Left: 150_000}, {Left: 150_000}, {Left: 150_000}}
	near("three beside it", secs(Shared(own, peers, 40_000)), 4*93_000.0/40_000)
	// A peer with less left ends first: 10 units at 1/s each (2/s in all),
	// then the own copy alone at 2/s: 10 s + 20/2 s.
	near("peer ends first", secs(Shared(Pace{At: at, Left: 30}, []Pace{{Left: 10}}, 2)), 20)
	// The own copy ends first: its 10 at half of 2/s.
	near("own ends first", secs(Shared(Pace{At: at, Left: 10}, []Pace{{Left: 30}}, 2)), 10)
	if _, ok := Shared(Pace{At: at, Left: 10}, []Pace{{Left: 30}}, 0); ok {
		t.Error("an estimate without a rate")
	}
}
