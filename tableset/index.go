package tableset

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
)

// TokenIndexName is the name reshard gives the token expression index of t.
func TokenIndexName(t Table) string {
	const suffix = "_reshard_token"
	name := t.Name
	if len(name)+len(suffix) > 63 { // NAMEDATALEN-1
		name = name[:63-len(suffix)]
	}
	return name + suffix
}

// TokenIndexStatement is the statement that creates the token expression
// index of t without blocking writes.
func TokenIndexStatement(t Table) string {
	return fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s ((%s))",
		pgx.Identifier{TokenIndexName(t)}.Sanitize(), t.Quoted(), t.TokenSQL(""))
}

// HasTokenIndex reports whether t has a valid, non-partial index whose first
// column is the token expression of its key, whatever its name: the index
// that lets copy, verify and cleanup of a range read only that range.
func HasTokenIndex(ctx context.Context, q Querier, t Table) (bool, error) {
	rows, err := q.Query(ctx, `
		SELECT pg_get_indexdef(i.indexrelid, 1, false)
		FROM pg_index i
		WHERE i.indrelid = $1::regclass AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NOT NULL`, t.Quoted())
	if err != nil {
		return false, err
	}
	exprs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, err
	}
	want := tokenFunc(t.KeyType) + "(" + t.KeyColumn + ",0)"
	for _, e := range exprs {
		if normalizeTokenExpr(e, t.KeyColumn) == want {
			return true, nil
		}
	}
	return false, nil
}

func tokenFunc(kt ring.KeyType) string {
	switch kt {
	case ring.KeyText:
		return "hashtextextended"
	case ring.KeyUUID:
		return "uuid_hash_extended"
	}
	return "hashint8extended"
}

// normalizeTokenExpr strips what pg_get_indexdef adds to the expression as
// written: identifier quotes, spaces, and the casts of the seed and of an
// int4/int2 key to bigint or a varchar key to text:
// hashint8extended((id)::bigint, (0)::bigint) → hashint8extended(id,0).
func normalizeTokenExpr(e, col string) string {
	e = strings.NewReplacer(`"`, "", " ", "", "::bigint", "", "::text", "", "'0'", "0", "(0)", "0").Replace(e)
	return strings.ReplaceAll(e, "("+col+")", col)
}

// CreateTokenIndex creates the token expression index of t CONCURRENTLY (it
// does not block writes, and cannot run inside a transaction). An invalid
// index left by an earlier interrupted build is dropped first.
func CreateTokenIndex(ctx context.Context, pool *pgxpool.Pool, t Table) error {
	var valid bool
	err := pool.QueryRow(ctx, `
		SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = $1::regclass AND c.relname = $2`, t.Quoted(), TokenIndexName(t)).Scan(&valid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("create token index of %s: %w", t, err)
	case !valid:
		drop := "DROP INDEX CONCURRENTLY IF EXISTS " + pgx.Identifier{t.Schema, TokenIndexName(t)}.Sanitize()
		if _, err := pool.Exec(ctx, drop); err != nil {
			return fmt.Errorf("create token index of %s: drop the invalid one left by an interrupted build: %w", t, err)
		}
	}
	if _, err := pool.Exec(ctx, TokenIndexStatement(t)); err != nil {
		return fmt.Errorf("create token index of %s: %w", t, err)
	}
	return nil
}

// EstimateRanges estimates t's rows and bytes in each range. The share of
// the table's rows in each range comes from a TABLESAMPLE of about a thousand
// pages (all of a small table), not from the range's share of the token
// space: a shard holds only the ranges it owns, so the token-space share
// under-counts by the number of shards. The total is the planner's reltuples
// when the table was analyzed, else the sample scaled up.
func EstimateRanges(ctx context.Context, q Querier, t Table, ranges []ring.Range) ([]Estimate, error) {
	ranges = ring.Normalize(ranges)
	if len(ranges) == 0 {
		return nil, nil
	}
	var (
		reltuples float64
		size      int64
	)
	if err := q.QueryRow(ctx, `SELECT reltuples, pg_table_size(oid) FROM pg_class WHERE oid = $1::regclass`, t.Quoted()).Scan(&reltuples, &size); err != nil {
		return nil, err
	}
	pages := float64(size) / 8192
	pct := 100.0
	if pages > 1000 {
		pct = 100 * 1000 / pages
	}
	cols := make([]string, len(ranges))
	for i, r := range ranges {
		cols[i] = "count(*) FILTER (WHERE " + ring.Predicate(t.TokenSQL(""), []ring.Range{r}) + ")"
	}
	stmt := fmt.Sprintf(`SELECT count(*), %s FROM %s TABLESAMPLE SYSTEM (%g) REPEATABLE (0)`, strings.Join(cols, ", "), t.Quoted(), pct)
	counts := make([]int64, len(ranges)+1)
	dest := make([]any, len(counts))
	for i := range counts {
		dest[i] = &counts[i]
	}
	if err := q.QueryRow(ctx, stmt).Scan(dest...); err != nil {
		return nil, fmt.Errorf("sample %s: %w", t, err)
	}
	sampled := counts[0]
	total := float64(sampled) * 100 / pct
	method := fmt.Sprintf("sample %.3g%%", pct)
	if reltuples >= 0 && pct < 100 { // -1: never analyzed
		total = reltuples
		method = fmt.Sprintf("statistics, sample %.3g%%", pct)
	}
	bytesPerRow := 0.0
	if total > 0 {
		bytesPerRow = float64(size) / total
	}
	out := make([]Estimate, 0, len(ranges))
	for i, r := range ranges {
		rows := 0.0
		if sampled > 0 {
			rows = total * float64(counts[i+1]) / float64(sampled)
		}
		out = append(out, Estimate{Table: t.String(), Range: r, Rows: int64(math.Round(rows)), Bytes: int64(math.Round(rows * bytesPerRow)), Method: method})
	}
	return out, nil
}
