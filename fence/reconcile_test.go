package fence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/topology"
)

// twoShards: a owns (MinToken, 0] (with the wrap), b owns (0, MaxToken].
var twoShards = ring.MustNew([]ring.VNode{{Token: 0, Shard: "a"}, {Token: ring.MaxToken, Shard: "b"}})

func mustTopology(t *testing.T, r *ring.Ring, migrating []topology.RangeState) topology.Topology {
	t.Helper()
	top, err := topology.New(r, migrating, "test")
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func TestWanted(t *testing.T) {
	low := ring.Range{Lo: ring.MinToken, Hi: 0}
	high := ring.Range{Lo: 0, Hi: ring.MaxToken}
	part := ring.Range{Lo: -4e18, Hi: -1e18} // inside a's range
	for _, tc := range []struct {
		name      string
		top       topology.Topology
		shard     string
		holds     []ring.Range
		wantRange []ring.Range
		wantGuard bool
	}{
		{"owner of half", mustTopology(t, twoShards, nil), "a", nil, []ring.Range{high}, false},
		{"the other half", mustTopology(t, twoShards, nil), "b", nil, []ring.Range{low}, false},
		{"a shard the ring does not name owns nothing", mustTopology(t, twoShards, nil), "c", nil, []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, false},
		{"a cutover in progress holds its source's ranges", mustTopology(t, twoShards, nil), "a", []ring.Range{part}, []ring.Range{part, high}, false},
		{
			"a migrating range is fenced on its target until cutover",
			mustTopology(t, twoShards, []topology.RangeState{{Range: part, Owner: "a", Status: topology.Migrating, From: "a", To: "c"}}),
			"c", nil, []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}, true,
		},
		{
			"and not on its source: a live move guards both",
			mustTopology(t, twoShards, []topology.RangeState{{Range: part, Owner: "a", Status: topology.Migrating, From: "a", To: "c"}}),
			"a", nil, []ring.Range{high}, true,
		},
		{
			"a shard no move uses keeps no guard",
			mustTopology(t, twoShards, []topology.RangeState{{Range: part, Owner: "a", Status: topology.Migrating, From: "a", To: "c"}}),
			"b", nil, []ring.Range{low}, false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Wanted(tc.top, tc.shard, tc.holds)
			if !slices.Equal(w.Ranges, ring.Normalize(tc.wantRange)) || w.Guard != tc.wantGuard {
				t.Fatalf("Wanted(%s) = %v guard %v; want %v guard %v", tc.shard, w.Ranges, w.Guard, ring.Normalize(tc.wantRange), tc.wantGuard)
			}
		})
	}
}

// controlFor publishes top as the only version of a fresh control database
// whose shards are the ring's and c.
func controlFor(t *testing.T, ctl *pgtest.DB, top topology.Topology) Control {
	t.Helper()
	ctx := context.Background()
	if err := topology.Migrate(ctx, ctl.Pool); err != nil {
		t.Fatal(err)
	}
	store := topology.NewStore(ctl.Pool)
	for _, n := range []string{"a", "b", "c"} {
		ref := topology.ConnRef{Host: "127.0.0.1", Port: 5432, Database: "x", User: "postgres"}
		if err := store.RegisterShard(ctx, topology.Shard{Name: n, Conn: ref, State: topology.ShardActive}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Publish(ctx, 0, top); err != nil {
		t.Fatal(err)
	}
	return Control{Pool: ctl.Pool, Store: store}
}

// keyWithToken returns a key whose token satisfies in.
func keyWithToken(t *testing.T, db *pgtest.DB, in func(int64) bool) int64 {
	for k := int64(1); ; k++ {
		if in(tokenOf(t, db, k)) {
			return k
		}
	}
}

// TestReconcile: a shard with no trigger gets its triggers, its fences and
// its guards from the topology; a second run changes nothing; a hold adds a
// fence, its release and a reconcile lift it; Compare reports drift made by
// hand.
func TestReconcile(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	part := ring.Range{Lo: -4e18, Hi: -1e18}
	ctl := controlFor(t, pgtest.NewDB(t, 1), mustTopology(t, twoShards, []topology.RangeState{{Range: part, Owner: "a", Status: topology.Migrating, From: "a", To: "c"}}))

	ch, err := Reconcile(ctx, db.Pool, "a", set, ctl)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Installed || len(ch.Refenced) != 1 || len(ch.GuardsOn) != 1 {
		t.Fatalf("first reconcile: %+v", ch)
	}
	mine := keyWithToken(t, db, func(tok int64) bool { return tok <= 0 && !part.Contains(tok) })
	theirs := keyWithToken(t, db, func(tok int64) bool { return tok > 0 })
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", mine); err != nil {
		t.Fatalf("write of an owned key: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", theirs); !router.IsFenceError(err) {
		t.Fatalf("write of a key b owns: %v", err)
	}
	var pe *pgconn.PgError
	if _, err := db.Pool.Exec(ctx, "TRUNCATE users"); !errors.As(err, &pe) || pe.Code != TruncateSQLState {
		t.Fatalf("TRUNCATE on a shard a live move uses: %v", err)
	}
	if ch, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil || ch.Changed() {
		t.Fatalf("second reconcile: %+v %v", ch, err)
	}

	// The cutover's hold.
	if err := ctl.Hold(ctx, "a", "cutover m1", 1, []ring.Range{part}); err != nil {
		t.Fatal(err)
	}
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	moving := keyWithToken(t, db, part.Contains)
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving); !router.IsFenceError(err) {
		t.Fatalf("write of a held key: %v", err)
	}
	if err := ctl.Release(ctx, "a", "cutover m1", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", moving); err != nil {
		t.Fatalf("write of a released key a owns: %v", err)
	}

	// Drift by hand: a fence lifted, the guard dropped.
	if err := Clear(ctx, db.Pool, set); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, "DROP TRIGGER reshard_no_truncate ON users")
	want, err := ctl.Want(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	have, err := Inspect(ctx, db.Pool, set)
	if err != nil {
		t.Fatal(err)
	}
	if d := fmt.Sprint(Compare("a", want, have)); !strings.Contains(d, "no TRUNCATE guard trigger") || !strings.Contains(d, "fenced nothing") || !strings.Contains(d, "TRUNCATE guard off") {
		t.Fatalf("drift: %v; want the fence, the guard trigger and the guard", d)
	}
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	have, _ = Inspect(ctx, db.Pool, set)
	if d := Compare("a", want, have); len(d) != 0 {
		t.Fatalf("drift after reconcile: %v", d)
	}
}

// TestReconcileNeverUndoesANewerHold: reconciles racing with a hold being
// recorded and fenced never leave the held range unfenced once the hold's
// own reconcile returned.
func TestReconcileNeverUndoesANewerHold(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	ctl := controlFor(t, pgtest.NewDB(t, 1), mustTopology(t, twoShards, nil))
	if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
		t.Fatal(err)
	}
	part := ring.Range{Lo: -4e18, Hi: -1e18}
	moving := keyWithToken(t, db, part.Contains)
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
					errs <- err
				}
			}()
		}
		if err := ctl.Hold(ctx, "a", "cutover m1", 1, []ring.Range{part}); err != nil {
			t.Fatal(err)
		}
		if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x') ON CONFLICT DO NOTHING", moving); !router.IsFenceError(err) {
			t.Fatalf("round %d: a held key written after the racing reconciles: %v", round, err)
		}
		if err := ctl.Release(ctx, "a", "cutover m1", 1); err != nil {
			t.Fatal(err)
		}
		if _, err := Reconcile(ctx, db.Pool, "a", set, ctl); err != nil {
			t.Fatal(err)
		}
	}
}
