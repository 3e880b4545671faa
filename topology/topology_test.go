package topology

import (
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/ring"
)

func TestNewValidatesMigratingRanges(t *testing.T) {
	r := ring.MustNew(halves("a", "b")) // a: [Min,0], b: (0,Max]
	mig := func(lo, hi int64, owner, from, to string) RangeState {
		return RangeState{Range: ring.Range{Lo: lo, Hi: hi}, Owner: owner, Status: Migrating, From: from, To: to}
	}
	tests := []struct {
		name    string
		states  []RangeState
		wantErr string
	}{
		{"none", nil, ""},
		{"before cutover", []RangeState{mig(10, 20, "b", "b", "c")}, ""},
		{"after cutover", []RangeState{mig(ring.MinToken, -5, "a", "c", "a")}, ""},
		{"two, unsorted", []RangeState{mig(30, 40, "b", "b", "c"), mig(10, 20, "b", "b", "c")}, ""},
		{"owner does not own it", []RangeState{mig(-10, 10, "b", "b", "c")}, "does not give all of it"},
		{"owner neither side", []RangeState{mig(10, 20, "b", "c", "d")}, "neither"},
		{"same from and to", []RangeState{mig(10, 20, "b", "b", "b")}, "distinct"},
		{"overlap", []RangeState{mig(10, 20, "b", "b", "c"), mig(15, 30, "b", "b", "c")}, "overlap"},
		{"empty range", []RangeState{mig(20, 20, "b", "b", "c")}, "empty"},
		{"stable listed", []RangeState{{Range: ring.Range{Lo: 10, Hi: 20}, Owner: "b", Status: Stable}}, "state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(r, tt.states, "test")
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	if _, err := New(nil, nil, "x"); err == nil {
		t.Fatal("a topology without a ring was accepted")
	}
}

func TestStatesCoverSpaceAndRoundTrip(t *testing.T) {
	// Three vnodes: a owns [Min,-100] and (100,Max], b owns (-100,0], c owns (0,100].
	r := ring.MustNew([]ring.VNode{{Token: -100, Shard: "a"}, {Token: 0, Shard: "b"}, {Token: 100, Shard: "c"}})
	mig := []RangeState{
		// a's wrapping vnode range is two Ranges, so moving parts of it is two moves.
		{Range: ring.Range{Lo: ring.MinToken, Hi: -200}, Owner: "a", Status: Migrating, From: "a", To: "d"},
		{Range: ring.Range{Lo: -50, Hi: 0}, Owner: "d", Status: Migrating, From: "b", To: "d"},
		{Range: ring.Range{Lo: 500, Hi: ring.MaxToken}, Owner: "a", Status: Migrating, From: "a", To: "d"},
	}
	// (-50,0] is b's in the ring; after cutover its owner is d, so the ring must say d.
	if _, err := New(r, mig, "x"); err == nil {
		t.Fatal("a cut-over range the ring does not give to its new owner was accepted")
	}
	mig[1].Owner = "b"
	topo, err := New(r, mig, "x")
	if err != nil {
		t.Fatal(err)
	}
	states := topo.States()
	// The states tile the token space exactly, in order.
	if states[0].Range.Lo != ring.MinToken || states[len(states)-1].Range.Hi != ring.MaxToken {
		t.Fatalf("states do not span the space: %v", states)
	}
	for i := 1; i < len(states); i++ {
		if states[i].Range.Lo != states[i-1].Range.Hi {
			t.Fatalf("gap or overlap between %v and %v", states[i-1], states[i])
		}
	}
	for _, tok := range []int64{ring.MinToken, ring.MinToken + 1, -200, -199, -100, -51, -50, -49, 0, 1, 100, 500, 501, ring.MaxToken} {
		want := topo.State(tok)
		if want.Owner != r.Owner(tok) {
			t.Errorf("token %d: state owner %s, ring owner %s", tok, want.Owner, r.Owner(tok))
		}
		n := 0
		for _, s := range states {
			if s.Range.Contains(tok) {
				n++
				if s.Status != want.Status || s.Owner != want.Owner {
					t.Errorf("token %d: States says %v, State says %v", tok, s, want)
				}
			}
		}
		if n != 1 {
			t.Errorf("token %d is in %d states", tok, n)
		}
	}
	if got := topo.State(-200); got.Status != Migrating || got.To != "d" {
		t.Errorf("State(-200) = %v, want migrating to d", got)
	}
	if got := topo.State(-199); got.Status != Stable {
		t.Errorf("State(-199) = %v, want stable", got)
	}
	back := fromStates(states)
	if len(back) != len(mig) {
		t.Fatalf("round trip: %v, want %v", back, mig)
	}
	for i := range back {
		if back[i] != topo.Migrating()[i] {
			t.Errorf("round trip %d: %v, want %v", i, back[i], topo.Migrating()[i])
		}
	}
}

func TestMigratingRangeAcrossVNodesIsCutAndMerged(t *testing.T) {
	// b owns (-100,0] and (0,100] as two vnodes; a move of (-50,50] spans both.
	r := ring.MustNew([]ring.VNode{{Token: -100, Shard: "a"}, {Token: 0, Shard: "b"}, {Token: 100, Shard: "b"}})
	topo, err := New(r, []RangeState{{Range: ring.Range{Lo: -50, Hi: 50}, Owner: "b", Status: Migrating, From: "b", To: "c"}}, "x")
	if err != nil {
		t.Fatal(err)
	}
	var pieces int
	for _, s := range topo.States() {
		if s.Status == Migrating {
			pieces++
		}
	}
	if pieces != 2 {
		t.Fatalf("want the move cut in 2 at the vnode bound, got %d: %v", pieces, topo.States())
	}
	if back := fromStates(topo.States()); len(back) != 1 || back[0].Range != (ring.Range{Lo: -50, Hi: 50}) {
		t.Fatalf("pieces not merged back: %v", back)
	}
}

func TestShardTransitions(t *testing.T) {
	all := []ShardState{ShardJoining, ShardActive, ShardLeaving, ShardRemoved}
	allowed := map[[2]ShardState]bool{
		{ShardJoining, ShardActive}:  true,
		{ShardJoining, ShardRemoved}: true,
		{ShardActive, ShardLeaving}:  true,
		{ShardLeaving, ShardActive}:  true,
		{ShardLeaving, ShardRemoved}: true,
		{ShardRemoved, ShardJoining}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := CanTransition(from, to); got != allowed[[2]ShardState{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %v", from, to, got)
			}
		}
	}
	if _, err := ParseShardState("gone"); err == nil {
		t.Error("ParseShardState accepted gone")
	}
}

// TestStateIn walks one shard through add-node, a rolled-back remove and a
// remove: every state is derived from the version alone, and every step is
// an allowed transition.
func TestStateIn(t *testing.T) {
	two := ring.MustNew([]ring.VNode{{Token: 0, Shard: "a"}, {Token: ring.MaxToken, Shard: "b"}})
	three := ring.MustNew([]ring.VNode{{Token: -1e18, Shard: "a"}, {Token: 0, Shard: "c"}, {Token: ring.MaxToken, Shard: "b"}})
	toC := ring.Range{Lo: -1e18, Hi: 0}
	mig := func(r *ring.Ring, owner, from, to string) Topology {
		top, err := New(r, []RangeState{{Range: toC, Owner: owner, Status: Migrating, From: from, To: to}}, "t")
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	stable := func(r *ring.Ring) Topology {
		top, err := New(r, nil, "t")
		if err != nil {
			t.Fatal(err)
		}
		return top
	}
	steps := []struct {
		name string
		top  Topology
		a, c ShardState
	}{
		{"before", stable(two), ShardActive, ShardRemoved},
		{"add c: migrating", mig(ring.MustNew([]ring.VNode{{Token: -1e18, Shard: "a"}, {Token: 0, Shard: "a"}, {Token: ring.MaxToken, Shard: "b"}}), "a", "a", "c"), ShardActive, ShardJoining},
		{"add c: cut over", mig(three, "c", "a", "c"), ShardActive, ShardJoining},
		{"add c: done", stable(three), ShardActive, ShardActive},
		{"remove c: migrating", mig(three, "c", "c", "a"), ShardActive, ShardLeaving},
		{"remove c: rolled back", stable(three), ShardActive, ShardActive},
		{"remove c: migrating again", mig(three, "c", "c", "a"), ShardActive, ShardLeaving},
		{"remove c: cut over", mig(ring.MustNew([]ring.VNode{{Token: -1e18, Shard: "a"}, {Token: 0, Shard: "a"}, {Token: ring.MaxToken, Shard: "b"}}), "a", "c", "a"), ShardActive, ShardLeaving},
		{"remove c: done", stable(two), ShardActive, ShardRemoved},
	}
	prev := ShardRemoved
	for _, s := range steps {
		if got := StateIn(s.top, "a"); got != s.a {
			t.Errorf("%s: a is %s, want %s", s.name, got, s.a)
		}
		got := StateIn(s.top, "c")
		if got != s.c {
			t.Errorf("%s: c is %s, want %s", s.name, got, s.c)
		}
		if got != prev && !CanTransition(prev, got) {
			t.Errorf("%s: c went %s -> %s, which the state machine does not allow", s.name, prev, got)
		}
		prev = got
	}
}

func TestConnRefDropsPassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://app:s3cret@db1.internal:6432/orders?sslmode=disable",
		"host=db1.internal port=6432 dbname=orders user=app password=s3cret sslmode=disable",
	} {
		c, err := ParseConnRef(dsn)
		if err != nil {
			t.Fatal(err)
		}
		want := ConnRef{Host: "db1.internal", Port: 6432, Database: "orders", User: "app"}
		if c != want {
			t.Errorf("%q: %+v, want %+v", dsn, c, want)
		}
		if strings.Contains(c.DSN(), "s3cret") || strings.Contains(c.String(), "s3cret") {
			t.Errorf("password leaked: %s / %s", c.DSN(), c)
		}
		cfg, err := pgconn.ParseConfig(c.DSN())
		if err != nil || cfg.Host != want.Host || cfg.Port != want.Port || cfg.Database != want.Database || cfg.User != want.User {
			t.Errorf("DSN %q does not parse back: %+v %v", c.DSN(), cfg, err)
		}
	}
	if _, err := ParseConnRef("postgres://app:s3cret@[bad"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("bad DSN: err %v (must fail without quoting the password)", err)
	}
}

func TestImbalance(t *testing.T) {
	figs := func(vs ...float64) []ShardFigures {
		out := make([]ShardFigures, len(vs))
		for i, v := range vs {
			out[i] = ShardFigures{Shard: string(rune('a' + i)), Rows: v}
		}
		return out
	}
	rows := func(f ShardFigures) float64 { return f.Rows }
	tests := []struct {
		vs      []float64
		hottest string
		median  float64
		ratio   float64
	}{
		{[]float64{10, 10, 10}, "a", 10, 1},
		{[]float64{10, 50, 20}, "b", 20, 2.5},
		{[]float64{10, 30, 20, 40}, "d", 25, 1.6},
		{[]float64{0, 0, 5}, "c", 0, math.Inf(1)},
		{[]float64{0, 0}, "", 0, 1},
	}
	for _, tt := range tests {
		im := imbalance(figs(tt.vs...), rows)
		if im.Hottest != tt.hottest || im.Median != tt.median || im.Ratio != tt.ratio {
			t.Errorf("%v: %+v, want hottest %s median %g ratio %g", tt.vs, im, tt.hottest, tt.median, tt.ratio)
		}
	}
	if b, err := imbalance(figs(0, 0, 5), rows).MarshalJSON(); err != nil || !strings.Contains(string(b), `"ratio":null`) {
		t.Errorf("infinite ratio as JSON: %s %v", b, err)
	}
}
