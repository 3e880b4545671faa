package cutover_test

import (
	"testing"

	"github.com/reshard/reshard/testkit/movetest"
	"github.com/reshard/reshard/testkit/pgtest"
	"github.com/reshard/reshard/verify"
)

// TestUserTypesWhoseOIDsDifferMove: an enum[] column, a composite with an
// enum and a domain field, a composite[] and a domain[], on shards where
// each of those types has another OID (b made three other types first, as
// a shard made by schema sync would). Copied (binary COPY carries the
// source's OIDs), caught up (pgoutput's text) and verified (hashed as
// text), every row arrives as it left. It passed on 6e755b7 too: the
// risk is ruled out for the copy, the catch-up and verify alike.
func TestUserTypesWhoseOIDsDifferMove(t *testing.T) {
	const types = `CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
		CREATE DOMAIN posint AS int CHECK (VALUE > 0);
		CREATE TYPE pair AS (m mood, n posint, tags text[]);
		CREATE TABLE typed (k bigint PRIMARY KEY, m mood, moods mood[], p pair, ps pair[], ns posint[])`
	shift := func(t testing.TB, e *movetest.Env) {
		e.DBs["b"].Exec(t, `CREATE TYPE shift AS ENUM ('x'); CREATE DOMAIN shift2 AS text; CREATE TYPE shift3 AS (a int)`)
	}
	e := movetest.New(t, "usertypes", 300, shift, movetest.Table(types, "typed", "k"))
	a, b := e.DBs["a"], e.DBs["b"]
	if a.QueryInt64(t, `SELECT 'mood'::regtype::oid::bigint`) == b.QueryInt64(t, `SELECT 'mood'::regtype::oid::bigint`) {
		t.Fatal("mood has one OID on both shards: the test proves nothing")
	}
	insert := `INSERT INTO typed SELECT k, 'ok', ARRAY['sad', NULL, 'happy']::mood[], ROW('happy', k % 7 + 1, ARRAY['a', NULL])::pair,
		ARRAY[ROW('sad', 1, NULL)::pair, NULL, ROW(NULL, 2, '{}')::pair], ARRAY[k, NULL]::posint[] FROM unnest($1::bigint[]) k`
	half := len(e.MovingKeys) / 2
	a.Exec(t, insert, e.MovingKeys[:half])
	e.Begin(t)
	e.Copy(t)
	e.StartForward(t)
	a.Exec(t, insert, e.MovingKeys[half:])
	a.Exec(t, `UPDATE typed SET moods = moods || 'ok'::mood, p.m = 'sad', ps = ps[1:1] WHERE k = ANY($1)`, e.MovingKeys[:3])
	movetest.Drain(t, a, e.Fwd)
	want, got := a.RowsAsText(t, "typed", "k"), b.RowsAsText(t, "typed", "k")
	if len(want) != len(e.MovingKeys) || len(want) == 0 {
		t.Fatalf("%d typed rows on a, want %d", len(want), len(e.MovingKeys))
	}
	pgtest.DiffRows(t, "b", want, got)
	rep, err := verify.Run(movetest.Ctx(t), e.Move.Source, e.Move.Target, verify.Options{Set: e.SrcSet, Ranges: e.Move.Ranges})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify: %d mismatches, problem %q", rep.Mismatches(), rep.Problem)
	}
	e.StopForward(t)
}
