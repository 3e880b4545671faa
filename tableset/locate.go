package tableset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Locate checks that every table of spec exists on every server of servers
// (by name), before anything is registered. A table no server has is named
// with the closest tables the servers have or the registry holds
// (registered, as schema.table): "did you mean public.users?", and how to
// create it; a table some servers lack names them. nil when every server has
// every table.
func Locate(ctx context.Context, servers map[string]Querier, spec Spec, registered []string) error {
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	slices.Sort(names)
	candidates := slices.Clone(registered)
	for _, n := range names {
		rows, err := servers[n].Query(ctx, `
			SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
			  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'reshard') AND n.nspname NOT LIKE 'pg\_%'`)
		if err != nil {
			return fmt.Errorf("list the tables of %s: %w", n, err)
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("list the tables of %s: %w", n, err)
		}
		candidates = append(candidates, have...)
	}
	slices.Sort(candidates)
	candidates = slices.Compact(candidates)
	var errs []error
	for _, ts := range spec.Tables {
		schema := ts.Schema
		if schema == "" {
			schema = "public"
		}
		name := schema + "." + ts.Table
		var lacking []string
		for _, n := range names {
			var ok bool
			err := servers[n].QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p'))`, schema, ts.Table).Scan(&ok)
			if err != nil {
				return fmt.Errorf("look for %s on %s: %w", name, n, err)
			}
			if !ok {
				lacking = append(lacking, n)
			}
		}
		switch {
		case len(lacking) == 0:
		case len(lacking) == len(names):
			fix := "create it on every shard first, with the same definition on each (the example's users and orders are in deploy/schema.sql: reshard dev psql shard1 -- -f deploy/schema.sql, and so on for each shard of the local cluster); reshard schema sync <shard> later gives a new shard the registered tables"
			if near := nearest(name, candidates); len(near) > 0 {
				fix = "did you mean " + strings.Join(near, " or ") + "? If not, " + fix
			}
			errs = append(errs, &Problem{Check: CheckTable, Shard: strings.Join(names, ", "), Table: name,
				Problem: fmt.Sprintf("table %s exists on no shard (%s)", name, strings.Join(names, ", ")),
				Fix:     fix})
		default:
			errs = append(errs, &Problem{Check: CheckTable, Shard: strings.Join(lacking, ", "), Table: name,
				Problem: fmt.Sprintf("table %s is missing on %s (the other shards have it)", name, strings.Join(lacking, ", ")),
				Fix:     fmt.Sprintf("create it on %s with the same definition as on the other shards", strings.Join(lacking, ", "))})
		}
	}
	return errors.Join(errs...)
}

// nearest returns the candidates closest to name (schema.table): an edit
// distance of at most a third of the table's name (at least 1), the same
// table name in another schema counting as close.
func nearest(name string, candidates []string) []string {
	_, table, _ := strings.Cut(name, ".")
	best, out := -1, []string(nil)
	for _, c := range candidates {
		_, ct, _ := strings.Cut(c, ".")
		d := editDistance(name, c)
		if ct == table {
			d = 0
		} else if dt := editDistance(table, ct); dt < d {
			d = dt
		}
		if d > max(1, len(table)/3) || c == name {
			continue
		}
		switch {
		case best < 0 || d < best:
			best, out = d, []string{c}
		case d == best:
			out = append(out, c)
		}
	}
	return out
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
