package topology

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// The routing contract in SQL (schema step 6, docs/contract.md) against the
// Go ring: the same tokens, the same owners.

// contractKeys gives the vectors of ring/testdata/tokens.json (computed by
// PostgreSQL 15) plus n random keys of each key type, edge values first,
// all in PostgreSQL text form.
func contractKeys(t *testing.T, n int) (map[ring.KeyType][]string, map[ring.KeyType]map[string]int64) {
	t.Helper()
	b, err := os.ReadFile("../ring/testdata/tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors map[ring.KeyType][]struct {
			Key   string `json:"key"`
			Token int64  `json:"token"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	keys := map[ring.KeyType][]string{}
	vec := map[ring.KeyType]map[string]int64{}
	for kt, vs := range f.Vectors {
		vec[kt] = map[string]int64{}
		for _, v := range vs {
			keys[kt] = append(keys[kt], v.Key)
			vec[kt][v.Key] = v.Token
		}
	}
	for _, kt := range []ring.KeyType{ring.KeyInt, ring.KeyText, ring.KeyUUID} {
		if len(vec[kt]) < 5 {
			t.Fatalf("only %d %s vectors in ring/testdata/tokens.json", len(vec[kt]), kt)
		}
	}
	for _, k := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1,
		math.MaxInt32, math.MinInt32, math.MaxInt32 + 1, math.MinInt32 - 1, math.MaxInt16, math.MinInt16, 1 << 32, -1 << 32} {
		keys[ring.KeyInt] = append(keys[ring.KeyInt], strconv.FormatInt(k, 10))
	}
	keys[ring.KeyText] = append(keys[ring.KeyText], "", "x", "twelve bytes", "thirteen byte", "ÄÖÜ", "日本語のキー", "🙂🙃", strings.Repeat("k", 1000))
	keys[ring.KeyUUID] = append(keys[ring.KeyUUID], "00000000-0000-0000-0000-000000000001", "80000000-0000-0000-0000-000000000000")
	rnd := rand.New(rand.NewPCG(14, 6))
	alphabet := []rune("abcXYZ019 -_/\\'\"%\t\n\u00e9\u00df\u0416\u4e2d\u6587\U0001F600\u200b")
	for range n {
		// Integers of every magnitude, not only large ones.
		k := int64(rnd.Uint64()) >> rnd.IntN(64)
		keys[ring.KeyInt] = append(keys[ring.KeyInt], strconv.FormatInt(k, 10))
		rs := make([]rune, rnd.IntN(40))
		for i := range rs {
			if rnd.IntN(2) == 0 {
				rs[i] = rune(1 + rnd.IntN(0x7e))
			} else {
				rs[i] = alphabet[rnd.IntN(len(alphabet))]
			}
		}
		keys[ring.KeyText] = append(keys[ring.KeyText], string(rs))
		var u [16]byte
		for i := range u {
			u[i] = byte(rnd.Uint32())
		}
		keys[ring.KeyUUID] = append(keys[ring.KeyUUID], ring.FormatUUID(u))
	}
	return keys, vec
}

func TestContractTokensMatchGo(t *testing.T) {
	s, db := newControl(t)
	ctx := testCtx(t)
	for kt, ks := range map[ring.KeyType]string{ring.KeyInt: "ints", ring.KeyText: "texts", ring.KeyUUID: "uuids"} {
		if _, err := s.RegisterTables(ctx, ks, kt, []tableset.TableSpec{{Schema: "public", Table: ks, KeyColumn: "k"}}); err != nil {
			t.Fatal(err)
		}
	}
	keys, vec := contractKeys(t, 3000)
	for _, c := range []struct {
		kt       ring.KeyType
		keyspace string
		// typed casts the text form to the SQL types reshard.token takes.
		typed []string
	}{
		{ring.KeyInt, "ints", []string{"bigint"}},
		{ring.KeyText, "texts", []string{"text", "varchar"}},
		{ring.KeyUUID, "uuids", []string{"uuid"}},
	} {
		exprs := []string{"reshard.token_of('" + c.keyspace + "', k)"}
		for _, ty := range c.typed {
			exprs = append(exprs, "reshard.token(k::"+ty+")")
		}
		for _, expr := range exprs {
			rows, err := db.Pool.Query(ctx, `SELECT k, `+expr+` FROM unnest($1::text[]) k`, keys[c.kt])
			if err != nil {
				t.Fatalf("%s: %v", expr, err)
			}
			n, bad := 0, 0
			for rows.Next() {
				var k string
				var got int64
				if err := rows.Scan(&k, &got); err != nil {
					t.Fatal(err)
				}
				want, err := ring.TokenOf(c.kt, k)
				if err != nil {
					t.Fatal(err)
				}
				if v, ok := vec[c.kt][k]; ok && v != want {
					t.Fatalf("ring.TokenOf(%s, %q) = %d, the vector says %d", c.kt, k, want, v)
				}
				if got != want {
					if bad++; bad <= 5 {
						t.Errorf("%s with k = %q: SQL %d, Go %d", expr, k, got, want)
					}
				}
				n++
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if n != len(keys[c.kt]) || bad > 0 {
				t.Fatalf("%s: %d of %d keys compared, %d differ", expr, n, len(keys[c.kt]), bad)
			}
			t.Logf("%s: %d keys, all equal to Go's", expr, n)
		}
	}
	// Integer widths: smallint and integer keys hash as their bigint value.
	rnd := rand.New(rand.NewPCG(1, 2))
	var i32 []int32
	var i16 []int16
	for range 2000 {
		i32 = append(i32, int32(rnd.Uint32()))
		i16 = append(i16, int16(rnd.Uint32()))
	}
	i32 = append(i32, math.MinInt32, math.MaxInt32, 0, -1)
	i16 = append(i16, math.MinInt16, math.MaxInt16, 0, -1)
	var got []int64
	if err := db.Pool.QueryRow(ctx, `SELECT array_agg(reshard.token(k) ORDER BY o) FROM unnest($1::integer[]) WITH ORDINALITY u(k, o)`, i32).Scan(&got); err != nil {
		t.Fatal(err)
	}
	for i, k := range i32 {
		if got[i] != ring.TokenInt64(int64(k)) {
			t.Fatalf("reshard.token(%d::integer) = %d, Go %d", k, got[i], ring.TokenInt64(int64(k)))
		}
	}
	if err := db.Pool.QueryRow(ctx, `SELECT array_agg(reshard.token(k) ORDER BY o) FROM unnest($1::smallint[]) WITH ORDINALITY u(k, o)`, i16).Scan(&got); err != nil {
		t.Fatal(err)
	}
	for i, k := range i16 {
		if got[i] != ring.TokenInt64(int64(k)) {
			t.Fatalf("reshard.token(%d::smallint) = %d, Go %d", k, got[i], ring.TokenInt64(int64(k)))
		}
	}
	// A text key under a nondeterministic collation is still hashed by its
	// bytes, as Go does (hashtextextended alone would hash its sort key).
	db.Exec(t, `CREATE COLLATION contract_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	var tok, plain int64
	if err := db.Pool.QueryRow(ctx, `SELECT reshard.token('Key-A' COLLATE contract_ci), hashtextextended('Key-A' COLLATE contract_ci, 0)`).Scan(&tok, &plain); err != nil {
		t.Fatal(err)
	}
	if tok != ring.TokenText("Key-A") {
		t.Fatalf("reshard.token under a nondeterministic collation = %d, Go %d", tok, ring.TokenText("Key-A"))
	}
	if plain == tok {
		t.Log("note: hashtextextended under the ICU collation equals the byte hash here; the COLLATE \"C\" case is not exercised")
	}
	// An unknown keyspace is named in the error, with its SQLSTATE.
	_, err := db.Pool.Exec(ctx, `SELECT reshard.token_of('nope', '1')`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != pgerr.CodeNoDataFound || !strings.Contains(pe.Message, "nope") {
		t.Fatalf("token_of of an unknown keyspace: %v", err)
	}
}

// tokensAround gives every vnode token of r, its neighbours, the ends of the
// token space and n random tokens.
func tokensAround(r *ring.Ring, n int, seed uint64) []int64 {
	toks := []int64{ring.MinToken, ring.MinToken + 1, ring.MaxToken, ring.MaxToken - 1, 0, -1, 1}
	for _, v := range r.VNodes() {
		toks = append(toks, v.Token)
		if v.Token != ring.MaxToken {
			toks = append(toks, v.Token+1)
		}
		toks = append(toks, v.Token-1) // never MinToken: no vnode is
	}
	rnd := rand.New(rand.NewPCG(seed, 3))
	for range n {
		toks = append(toks, int64(rnd.Uint64()))
	}
	return toks
}

func TestContractOwnerAndTopology(t *testing.T) {
	s, db := newControl(t)
	ctx := testCtx(t)
	register(t, s, "s1", "s2", "s3", "s4")
	built, err := ring.Build([]ring.Shard{{Name: "s1"}, {Name: "s2"}, {Name: "s3"}}, ring.Options{VNodes: 16})
	if err != nil {
		t.Fatal(err)
	}
	// Keyspace accts: a ring ending exactly at MaxToken, so the wrapping
	// range is only [MinToken, first].
	maxEnd := mustTopo(t, append(halves("s1", "s2"), ring.VNode{Token: -1 << 62, Shard: "s3"}), nil, "initial")
	mustPublish(t, s.In("accts"), 0, maxEnd)

	versions := []Topology{mustTopo(t, single("s4"), nil, "initial"), mustTopo(t, built.VNodes(), nil, "three shards")}
	// A migrating range cut over to s4 inside one of s1's ranges.
	var mig ring.Range
	for _, or := range built.AllRanges() {
		if or.Shard == "s1" && or.Range.Lo != ring.MinToken {
			mig = ring.Range{Lo: or.Range.Lo, Hi: or.Range.Lo + (or.Range.Hi-or.Range.Lo)/2}
			break
		}
	}
	vn := append(built.VNodes(), ring.VNode{Token: mig.Hi, Shard: "s4"})
	versions = append(versions, mustTopo(t, vn, []RangeState{{Range: mig, Owner: "s4", Status: Migrating, From: "s1", To: "s4"}}, "cutover"))

	check := func(ks string, topo Topology, toks []int64) {
		t.Helper()
		var owners []string
		if err := db.Pool.QueryRow(ctx, `SELECT array_agg(reshard.owner($1, tk) ORDER BY o) FROM unnest($2::bigint[]) WITH ORDINALITY u(tk, o)`, ks, toks).Scan(&owners); err != nil {
			t.Fatal(err)
		}
		for i, tk := range toks {
			if want := topo.Ring.Owner(tk); owners[i] != want {
				t.Fatalf("keyspace %s v%d: reshard.owner(token %d) = %s, the Go ring says %s", ks, topo.Version, tk, owners[i], want)
			}
		}
		var v int64
		var rangesJ []byte
		if err := db.Pool.QueryRow(ctx, `SELECT version, ranges FROM reshard.current_topology($1)`, ks).Scan(&v, &rangesJ); err != nil {
			t.Fatal(err)
		}
		var states []RangeState
		if err := json.Unmarshal(rangesJ, &states); err != nil {
			t.Fatal(err)
		}
		if v != topo.Version || len(states) != len(topo.States()) {
			t.Fatalf("current_topology(%s): v%d with %d ranges, want v%d with %d", ks, v, len(states), topo.Version, len(topo.States()))
		}
	}
	for i, topo := range versions {
		topo = mustPublish(t, s, int64(i), topo)
		toks := tokensAround(topo.Ring, 2000, uint64(i))
		check(DefaultKeyspace, topo, toks)
		t.Logf("v%d: %d tokens, reshard.owner equals Ring.Owner", topo.Version, len(toks))
	}
	cur, err := s.In("accts").Current(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("accts", cur, tokensAround(cur.Ring, 500, 9))

	// The migrating range as current_ranges shows it: owner, from, to.
	var owner, state, from, to string
	if err := db.Pool.QueryRow(ctx, `SELECT owner, state, from_shard, to_shard FROM reshard.current_ranges WHERE keyspace = 'default' AND lo = $1 AND hi = $2`, mig.Lo, mig.Hi).
		Scan(&owner, &state, &from, &to); err != nil {
		t.Fatalf("migrating range %s in reshard.current_ranges: %v", mig, err)
	}
	if owner != "s4" || state != "migrating" || from != "s1" || to != "s4" {
		t.Fatalf("migrating range %s: owner %s state %s from %s to %s", mig, owner, state, from, to)
	}
	// A keyspace without topology: an error naming it, not NULL.
	for _, q := range []string{`SELECT reshard.owner('nope', 0)`, `SELECT * FROM reshard.current_topology('nope')`, `SELECT reshard.settled('nope')`} {
		_, err := db.Pool.Exec(ctx, q)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != pgerr.CodeNoDataFound || !strings.Contains(pe.Message, "nope") {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestContractSettled: a range is settled only once it is stable and the
// move that touched it has ended (its rows deleted from the old owner),
// which the topology alone does not say: cleanup publishes the range stable
// before it deletes.
func TestContractSettled(t *testing.T) {
	s, db := newControl(t)
	ctx := testCtx(t)
	register(t, s, "a", "b")
	before := mustTopo(t, halves("a", "a"), nil, "initial") // one shard, two vnodes
	mustPublish(t, s, 0, before)
	after := mustTopo(t, halves("a", "b"), nil, "planned")
	moving := ring.Range{Lo: 0, Hi: ring.MaxToken}
	if err := s.SavePlan(ctx, Plan{MigrationID: "m1", FromVersion: 1, Before: before.Ring, After: after.Ring,
		Moves: []ring.Move{{Range: moving, From: "a", To: "b"}}}); err != nil {
		t.Fatal(err)
	}
	settled := func() map[ring.Range]bool {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT lo, hi, settled FROM reshard.current_ranges WHERE keyspace = 'default'`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[ring.Range]bool{}
		for rows.Next() {
			var r ring.Range
			var ok bool
			if err := rows.Scan(&r.Lo, &r.Hi, &ok); err != nil {
				t.Fatal(err)
			}
			out[r] = ok
		}
		return out
	}
	all := func() bool {
		t.Helper()
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT reshard.settled('default')`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	moveState := func() string {
		t.Helper()
		var st string
		if err := db.Pool.QueryRow(ctx, `SELECT state FROM reshard.moves WHERE migration_id = 'm1' AND from_shard = 'a' AND to_shard = 'b'`).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	low := ring.Range{Lo: ring.MinToken, Hi: 0}
	// Planned, not started (no version names the migration): settled.
	if got := settled(); !got[low] || !got[moving] || !all() {
		t.Fatalf("before the migration publishes: %v", got)
	}
	steps := []Topology{
		mustTopo(t, before.Ring.VNodes(), []RangeState{{Range: moving, Owner: "a", Status: Migrating, From: "a", To: "b"}}, "migrating"),
		mustTopo(t, after.Ring.VNodes(), []RangeState{{Range: moving, Owner: "b", Status: Migrating, From: "a", To: "b"}}, "cutover"),
		mustTopo(t, after.Ring.VNodes(), nil, "cleanup of move m1-1: stable on b"),
	}
	for i, topo := range steps {
		mustPublish(t, s, int64(i+1), topo.WithMigrationID("m1"))
		got := settled()
		if !got[low] || got[moving] || all() || moveState() != "running" {
			t.Fatalf("after %q: settled %v, keyspace settled %v, move %s; want only %s settled", topo.Reason, got, all(), moveState(), low)
		}
	}
	running, err := s.RunningMoves(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0].From != "a" || running[0].To != "b" || len(running[0].Ranges) != 1 || running[0].Ranges[0] != moving {
		t.Fatalf("running moves before the end: %+v", running)
	}
	// The rows are deleted from a: the cleanup records the end.
	end := MoveEnd{MigrationID: "m1", MoveID: "m1-1", From: "a", To: "b", Ranges: []ring.Range{moving}, Outcome: MoveCleanedUp}
	for range 2 { // a retried cleanup records it again: no-op
		if err := s.RecordMoveEnd(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	if got := settled(); !got[low] || !got[moving] || !all() || moveState() != "cleaned_up" {
		t.Fatalf("after the move's end: settled %v, keyspace %v, move %s", got, all(), moveState())
	}
	if running, err := s.RunningMoves(ctx); err != nil || len(running) != 0 {
		t.Fatalf("running moves after the end: %+v %v", running, err)
	}
	if err := s.RecordMoveEnd(ctx, MoveEnd{MigrationID: "m1", From: "a", To: "b", Outcome: "done"}); err == nil {
		t.Fatal("an unknown outcome was recorded")
	}
}

// newRawControl is a control database with no schema.
func newRawControl(t *testing.T) *pgtest.DB {
	t.Helper()
	return pgtest.NewDB(t, 0)
}

// TestContractStepBackfillsEndedMigrations: moves of migrations that ended
// before schema step 6 (their "migration <id> (<kind>) ends" version) are
// recorded as ended; a migration still running is not.
func TestContractStepBackfillsEndedMigrations(t *testing.T) {
	db := newRawControl(t)
	ctx := testCtx(t)
	if err := migrateTo(ctx, db.Pool, 5); err != nil {
		t.Fatal(err)
	}
	s := NewStore(db.Pool)
	register(t, s, "a", "b", "c")
	before := mustTopo(t, halves("a", "a"), nil, "initial")
	mustPublish(t, s, 0, before)
	ab := mustTopo(t, halves("a", "b"), nil, "")
	for _, p := range []Plan{
		{MigrationID: "old_1", FromVersion: 1, Before: before.Ring, After: ab.Ring, Moves: []ring.Move{{Range: ring.Range{Lo: 0, Hi: ring.MaxToken}, From: "a", To: "b"}}},
		{MigrationID: "old_2", FromVersion: 3, Before: ab.Ring, After: ab.Ring, Moves: []ring.Move{{Range: ring.Range{Lo: 0, Hi: 1 << 40}, From: "b", To: "c"}}},
	} {
		// As SavePlan wrote plans at schema step 5 (no weights column yet).
		before, _ := json.Marshal(p.Before)
		after, _ := json.Marshal(p.After)
		moves, _ := json.Marshal(p.Moves)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO reshard.plans (migration_id, from_version, ring_before, ring_after, moves) VALUES ($1, $2, $3, $4, $5)`,
			p.MigrationID, p.FromVersion, before, after, moves); err != nil {
			t.Fatal(err)
		}
	}
	mustPublish(t, s, 1, mustTopo(t, ab.Ring.VNodes(), nil, "cleanup of move old_1-1").WithMigrationID("old_1"))
	mustPublish(t, s, 2, mustTopo(t, ab.Ring.VNodes(), nil, "migration old_1 (add-node) ends").WithMigrationID("old_1"))
	// old_2 started (a version names it) and has not ended; "old%2" must
	// not match it through LIKE.
	mustPublish(t, s, 3, mustTopo(t, ab.Ring.VNodes(), []RangeState{{Range: ring.Range{Lo: 0, Hi: 1 << 40}, Owner: "b", Status: Migrating, From: "b", To: "c"}}, "migration old_2 (move): 1 moves start").WithMigrationID("old_2"))
	if err := Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT migration_id || ':' || state FROM reshard.moves ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if strings.Join(got, ",") != "old_1:ended,old_2:running" {
		t.Fatalf("moves after step 6: %v, want old_1 ended and old_2 running", got)
	}
}
