package tableset

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Checks of what a table must be to be sharded, as they appear in
// Problem.Check (Shardable).
const (
	CheckKeyNotNull   = "key_not_null"
	CheckKeyCollation = "key_collation"
	CheckPartitioned  = "partitioned"
)

// Shardable lists what keeps a table from being sharded, beyond what
// Introspect refuses: a key column that allows NULL (a NULL key has no token,
// so no shard owns its row: it is never moved, verified or fenced), a text key
// under a nondeterministic collation, and a partitioned table. Registration
// (init, keyspace add-table), preflight and schema sync refuse these; the
// other readers of a table's shape do not, so that reshard topology check and
// check placement can still report on a table registered before this check.
//
// Why refuse a nondeterministic collation rather than hash under COLLATE "C":
// hashtextextended(k, 0) hashes under the column's collation, so every
// statement on the shards (fence, copy, verify, cleanup, placement, the token
// index and the publication's row filter) would need the COLLATE clause, and
// so would every application's own SQL; while reshard.token and the routers
// hash the bytes. Keys equal under such a collation ('A' and 'a' under a
// case-insensitive one) would also be one key to the primary key but two
// tokens. A key compared as bytes is the only kind both sides agree on.
//
// Partitioned tables are refused because PostgreSQL 15's pg_dump --table
// leaves out their partitions (schema sync would create an empty parent), a
// token index on the parent is not created ON ONLY and attached per
// partition, and the copy, fences and publications would have to name each
// partition.
func Shardable(t Table, where string) []*Problem {
	var out []*Problem
	if t.Partitioned {
		out = append(out, &Problem{Check: CheckPartitioned, Shard: where, Table: t.String(),
			Problem: fmt.Sprintf("table %s on %s is partitioned: reshard does not shard partitioned tables (their partitions, per-partition token indexes and fences are not handled)", t, where),
			Fix:     "shard a plain table (its rows spread over the shards already), or leave this table out of the keyspace"})
	}
	if c, ok := t.Column(t.KeyColumn); ok && !c.NotNull {
		out = append(out, &Problem{Check: CheckKeyNotNull, Shard: where, Table: t.String(),
			Problem: fmt.Sprintf("shard key %s.%s on %s allows NULL: a row with a NULL key has no token, so no shard owns it and no migration moves it", t, t.KeyColumn, where),
			Fix:     fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL (on every shard; delete or fix the rows with a NULL key first)", t.Quoted(), pgx.Identifier{t.KeyColumn}.Sanitize())})
	}
	if t.KeyCollation != "" {
		out = append(out, &Problem{Check: CheckKeyCollation, Shard: where, Table: t.String(),
			Problem: fmt.Sprintf("shard key %s.%s on %s has the nondeterministic collation %s: the shards' SQL would hash it under that collation while reshard.token and the routers hash its bytes, so rows would be refused by their own owner", t, t.KeyColumn, where, t.KeyCollation),
			Fix:     fmt.Sprintf("give the key a deterministic collation: ALTER TABLE %s ALTER COLUMN %s TYPE %s COLLATE \"C\" (on every shard)", t.Quoted(), pgx.Identifier{t.KeyColumn}.Sanitize(), keyTypeName(t))})
	}
	return out
}

// ShardableSet is Shardable of every table of set, joined; nil when every
// table can be sharded.
func ShardableSet(set Set, where string) error {
	var errs []error
	for _, t := range set.Tables {
		for _, p := range Shardable(t, where) {
			errs = append(errs, p)
		}
	}
	return errors.Join(errs...)
}

func keyTypeName(t Table) string {
	if c, ok := t.Column(t.KeyColumn); ok {
		return c.Type
	}
	return "text"
}

// NullKeyRows counts the rows of one table whose shard key is NULL: no
// shard owns them (a NULL key has no token), so no move, verify or fence
// sees them. Samples are up to five of their primary keys, as text.
type NullKeyRows struct {
	Table   string   `json:"table"`
	Rows    int64    `json:"rows"`
	Samples []string `json:"samples,omitempty"`
}

// NullKeys counts, table by table, the rows of set on one server with a
// NULL shard key; only tables with such rows are returned. A table whose
// key column is NOT NULL is not scanned.
func NullKeys(ctx context.Context, q Querier, set Set) ([]NullKeyRows, error) {
	var out []NullKeyRows
	for _, t := range set.Tables {
		if c, ok := t.Column(t.KeyColumn); ok && c.NotNull {
			continue
		}
		pk := make([]string, len(t.PK))
		for i, c := range t.PK {
			pk[i] = pgx.Identifier{c}.Sanitize()
		}
		sample := pk[0] + "::text"
		if len(pk) > 1 {
			sample = "ROW(" + strings.Join(pk, ", ") + ")::text"
		}
		n := NullKeyRows{Table: t.String()}
		err := q.QueryRow(ctx, `SELECT count(*), coalesce((array_agg(`+sample+` ORDER BY `+strings.Join(pk, ", ")+`))[1:5], '{}') FROM `+t.Quoted()+
			` WHERE `+pgx.Identifier{t.KeyColumn}.Sanitize()+` IS NULL`).Scan(&n.Rows, &n.Samples)
		if err != nil {
			return nil, fmt.Errorf("count the rows of %s with a NULL key: %w", t, err)
		}
		if n.Rows > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}
