package fence

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Stray counts the rows of one table that a shard holds in token space it
// must not serve (a Want's Ranges: the space it does not own), with up to
// five sample keys.
type Stray struct {
	Table   string   `json:"table"`
	Rows    int64    `json:"rows"`
	Samples []string `json:"samples,omitempty"`
}

// Strays counts, table by table, the rows of set on a shard whose token lies
// in notOwned. Only tables with such rows are returned. One scan per table.
func Strays(ctx context.Context, pool *pgxpool.Pool, set tableset.Set, notOwned []ring.Range) ([]Stray, error) {
	notOwned = ring.Normalize(notOwned)
	if len(notOwned) == 0 {
		return nil, nil
	}
	var out []Stray
	for _, t := range set.Tables {
		s := Stray{Table: t.String()}
		key := pgx.Identifier{t.KeyColumn}.Sanitize()
		q := `SELECT count(*), coalesce((array_agg(` + key + `::text ORDER BY ` + key + `))[1:5], '{}') FROM ` + t.Quoted() +
			` WHERE ` + ring.ScanPredicate(t.TokenSQL(""), notOwned)
		if err := pool.QueryRow(ctx, q).Scan(&s.Rows, &s.Samples); err != nil {
			return nil, fmt.Errorf("count rows of %s outside the shard's ranges: %w", t, err)
		}
		if s.Rows > 0 {
			out = append(out, s)
		}
	}
	return out, nil
}

// StraySpace is the token space in which a row on shard is misplaced in
// topology t: ranges another shard owns, except migrating ranges that name
// shard as their source or target (both hold the rows while a move runs).
func StraySpace(t topology.Topology, shard string) []ring.Range {
	var out []ring.Range
	for _, s := range t.States() {
		if s.Owner == shard || (s.Status == topology.Migrating && (s.From == shard || s.To == shard)) {
			continue
		}
		out = append(out, s.Range)
	}
	return ring.Normalize(out)
}
