package fence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/testkit/pgtest"
)

// The fence error speaks as the CLI and docs/contract.md do: a range is
// (lo,hi] as ring.Range prints it ([MinToken,hi] from MinToken), never
// int8range's [lo,hi) or an unbounded (,); and it names the topology
// version the fence was derived from, not an undefined "epoch".
func TestFenceErrorSpeaksTheCLIsRanges(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	refusal := func(key int64) string {
		t.Helper()
		_, err := db.Pool.Exec(ctx, "INSERT INTO users VALUES ($1, 'x')", key)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != router.FenceSQLState {
			t.Fatalf("insert of key %d: err %v, want SQLSTATE %s", key, err, router.FenceSQLState)
		}
		for _, bad := range []string{"epoch", "(,", ",)", ")"} {
			if strings.Contains(pe.Message, bad) {
				t.Errorf("message holds %q: %s", bad, pe.Message)
			}
		}
		return pe.Message
	}
	tok7 := tokenOf(t, db, 7)
	for _, tc := range []struct {
		name  string
		fence ring.Range
	}{
		{"inside the space", ring.Range{Lo: tok7 - 10, Hi: tok7 + 10}},
		{"from MinToken", ring.Range{Lo: ring.MinToken, Hi: tok7}},
		{"to MaxToken", ring.Range{Lo: tok7 - 1, Hi: ring.MaxToken}},
		{"the whole space: a shard that owns nothing", ring.Range{Lo: ring.MinToken, Hi: ring.MaxToken}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Clear(ctx, db.Pool, set); err != nil {
				t.Fatal(err)
			}
			if err := Fence(ctx, db.Pool, set, []ring.Range{tc.fence}, 6); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("INSERT on public.users refused: token %d lies in range %s, fenced on this shard since topology version 6", tok7, tc.fence)
			if got := refusal(7); !strings.Contains(got, want) {
				t.Fatalf("message\n  %s\nwant it to hold\n  %s", got, want)
			}
		})
	}
}

// Reconcile decides what the registry's ranges become without reading them
// back, so multirangeText must be PostgreSQL's own text of the multirange
// (otherwise every function would look replaced to Inspect and be compiled
// again by every reconcile).
func TestMultirangeTextIsPostgreSQLs(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	for _, rs := range [][]ring.Range{
		nil,
		{{Lo: ring.MinToken, Hi: ring.MaxToken}},
		{{Lo: ring.MinToken, Hi: -5}},
		{{Lo: 5, Hi: ring.MaxToken}},
		{{Lo: ring.MinToken, Hi: ring.MinToken + 1}, {Lo: ring.MaxToken - 1, Hi: ring.MaxToken}},
		{{Lo: -10, Hi: 0}, {Lo: 0, Hi: 10}, {Lo: 11, Hi: 20}, {Lo: 30, Hi: 25}},
		{{Lo: 100, Hi: 200}, {Lo: -300, Hi: -200}, {Lo: 150, Hi: 400}},
	} {
		var got string
		mr := "'{}'::int8multirange"
		if len(ring.Normalize(rs)) > 0 {
			mr = multirange(rs)
		}
		if err := db.Pool.QueryRow(ctx, "SELECT ("+mr+")::text").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := multirangeText(rs); got != want {
			t.Errorf("%v: PostgreSQL prints %s, multirangeText %s", rs, got, want)
		}
	}
}
