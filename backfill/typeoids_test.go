package backfill

import (
	"context"
	"testing"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/testkit/pgtest"
)

// userTypes are types whose binary form carries the OIDs of the types in
// them (array_send the element type's, record_send each field's), which
// differ between shards that created them in another order (schema sync
// creates them anew on every shard).
const userTypes = `
	CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
	CREATE DOMAIN posint AS int CHECK (VALUE > 0);
	CREATE TYPE pair AS (m mood, n posint, tags text[]);
	CREATE TABLE typed (id bigint PRIMARY KEY, m mood, moods mood[], p pair, ps pair[], ns posint[], n posint)`

// TestCopyUserTypesWhoseOIDsDiffer: an enum[] column, a composite with an
// enum and a domain field, an array of composites and an array of a domain,
// on a target where every one of those types has another OID than on the
// source, copy value for value through the binary COPY (the stream does
// carry the source's OIDs: mood's 16386 where the target's is 16395).
// PostgreSQL 15's array_recv and record_recv refuse a mismatch only between
// built-in OIDs, so this passed on 6e755b7 too: the risk is ruled out, and
// this test keeps it so on the servers reshard is tested with.
func TestCopyUserTypesWhoseOIDsDiffer(t *testing.T) {
	ctx := context.Background()
	src, dst := pgtest.NewDB(t, 0), pgtest.NewDB(t, 1)
	src.Exec(t, userTypes)
	dst.Exec(t, `CREATE TYPE shift AS ENUM ('x'); CREATE DOMAIN shift2 AS text; CREATE TYPE shift3 AS (a int);`+userTypes)
	if src.QueryInt64(t, `SELECT 'mood'::regtype::oid::bigint`) == dst.QueryInt64(t, `SELECT 'mood'::regtype::oid::bigint`) {
		t.Fatal("mood has one OID on both sides: the test proves nothing")
	}
	src.Exec(t, `INSERT INTO typed SELECT g, 'ok', ARRAY['sad', NULL, 'happy']::mood[], ROW('happy', g, ARRAY['a', NULL])::pair,
		ARRAY[ROW('sad', 1, NULL)::pair, NULL, ROW(NULL, g, '{}')::pair], ARRAY[g, NULL, 2]::posint[], g
		FROM generate_series(1, 300) g;
		INSERT INTO typed (id) VALUES (301)`)
	set, err := tableset.Introspect(ctx, dst.Pool, tableset.Spec{Name: "s", Tables: []tableset.TableSpec{{Table: "typed", KeyColumn: "id"}}}, "target")
	if err != nil {
		t.Fatal(err)
	}
	all := []ring.Range{{Lo: ring.MinToken, Hi: ring.MaxToken}}
	if _, err := Copy(ctx, src.Pool, dst.Pool, Options{Move: "typed", Set: set, Ranges: all, ChunkRows: 100}); err != nil {
		t.Fatal(err)
	}
	want, got := src.RowsAsText(t, "typed", "id"), dst.RowsAsText(t, "typed", "id")
	if len(want) != 301 {
		t.Fatalf("%d source rows, want 301", len(want))
	}
	pgtest.DiffRows(t, "target", want, got)
}
