package topology

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// A keyspace is what is sharded: a named group of tables that share one
// shard-key type, registered in the control database with each table's key
// column (DESIGN.md §1). It has its own ring and topology versions (a Store
// In it). Every migration moves every table of its keyspace; a table left
// out would keep rows on shards that no longer own them.

// DefaultKeyspace is the name of the keyspace when none is given.
const DefaultKeyspace = "default"

// TableKey is schema.table:key, the form the CLI takes (schema defaults to
// public).
func TableKey(t tableset.TableSpec) string {
	schema := t.Schema
	if schema == "" {
		schema = "public"
	}
	return schema + "." + t.Table + ":" + t.KeyColumn
}

// Keyspace is a registered keyspace.
type Keyspace struct {
	Name    string               `json:"name"`
	KeyType ring.KeyType         `json:"key_type"`
	Tables  []tableset.TableSpec `json:"tables"` // sorted by schema, table
}

// Spec is the keyspace as the table set every migration of it moves.
func (k Keyspace) Spec() tableset.Spec {
	return tableset.Spec{Name: k.Name, Tables: slices.Clone(k.Tables)}
}

// ErrNoKeyspace: no keyspace is registered.
var ErrNoKeyspace = errors.New("no keyspace is registered: register the sharded tables with reshard init --table t:key (or reshard keyspace add-table)")

var keyspaceName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// ValidKeyspaceName reports whether name can name a keyspace.
func ValidKeyspaceName(name string) bool { return keyspaceName.MatchString(name) }

// Keyspaces returns every registered keyspace with its tables.
func (s *Store) Keyspaces(ctx context.Context) ([]Keyspace, error) {
	rows, err := s.pool.Query(ctx, `SELECT k.name, k.key_type, t.schema_name, t.table_name, t.key_column
FROM reshard.keyspaces k LEFT JOIN reshard.keyspace_tables t ON t.keyspace = k.name
ORDER BY k.name, t.schema_name, t.table_name`)
	if err != nil {
		return nil, fmt.Errorf("read keyspaces: %w", err)
	}
	defer rows.Close()
	var out []Keyspace
	for rows.Next() {
		var name, kt string
		var schema, table, key *string
		if err := rows.Scan(&name, &kt, &schema, &table, &key); err != nil {
			return nil, fmt.Errorf("read keyspaces: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, Keyspace{Name: name, KeyType: ring.KeyType(kt)})
		}
		if schema != nil {
			k := &out[len(out)-1]
			k.Tables = append(k.Tables, tableset.TableSpec{Schema: *schema, Table: *table, KeyColumn: *key})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read keyspaces: %w", err)
	}
	return out, nil
}

// ResolveKeyspace returns the keyspace named name or, with name "", the
// cluster's only keyspace. ErrNoKeyspace when there is none (or none named
// name); an error naming them when name is "" and there are several.
func (s *Store) ResolveKeyspace(ctx context.Context, name string) (Keyspace, error) {
	all, err := s.Keyspaces(ctx)
	if err != nil {
		return Keyspace{}, err
	}
	if name == "" {
		switch len(all) {
		case 0:
			return Keyspace{}, ErrNoKeyspace
		case 1:
			return all[0], nil
		}
		var names []string
		for _, k := range all {
			names = append(names, k.Name)
		}
		return Keyspace{}, fmt.Errorf("the cluster has %d keyspaces (%s): name one with --keyspace", len(all), strings.Join(names, ", "))
	}
	for _, k := range all {
		if k.Name == name {
			return k, nil
		}
	}
	return Keyspace{}, fmt.Errorf("keyspace %s: %w", name, ErrNoKeyspace)
}

// RegisterTables adds tables to keyspace name, creating it with keyType
// when it does not exist. Tables already registered with the same key are
// kept (a retry is harmless); a table registered with another key, in
// another keyspace, or a key type differing from the keyspace's is refused
// and nothing is changed. The caller checks the tables on the shards first.
func (s *Store) RegisterTables(ctx context.Context, name string, keyType ring.KeyType, tables []tableset.TableSpec) (Keyspace, error) {
	if !ValidKeyspaceName(name) {
		return Keyspace{}, fmt.Errorf("keyspace name %q: use lower-case letters, digits and '_', starting with a letter", name)
	}
	if len(tables) == 0 {
		return Keyspace{}, fmt.Errorf("keyspace %s: no table to register", name)
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// One registrar at a time: the checks below read what others write.
		if _, err := tx.Exec(ctx, `LOCK TABLE reshard.keyspaces IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		exists, fresh, err := checkRegistration(ctx, tx, name, keyType, tables)
		if err != nil {
			return err
		}
		if !exists {
			if _, err := tx.Exec(ctx, `INSERT INTO reshard.keyspaces (name, key_type) VALUES ($1, $2)`, name, string(keyType)); err != nil {
				return err
			}
		}
		for _, t := range fresh {
			if _, err := tx.Exec(ctx, `INSERT INTO reshard.keyspace_tables (keyspace, schema_name, table_name, key_column) VALUES ($1, $2, $3, $4)`,
				name, t.Schema, t.Table, t.KeyColumn); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Keyspace{}, fmt.Errorf("register tables in keyspace %s: %w", name, err)
	}
	all, err := s.Keyspaces(ctx)
	if err != nil {
		return Keyspace{}, err
	}
	for _, k := range all {
		if k.Name == name {
			return k, nil
		}
	}
	return Keyspace{}, fmt.Errorf("keyspace %s vanished after its registration", name)
}

// CheckRegistration says whether RegisterTables would accept tables in
// keyspace name with keyType, writing nothing: init checks it before it
// publishes a keyspace's first topology, so that a refused registration
// leaves nothing behind.
func (s *Store) CheckRegistration(ctx context.Context, name string, keyType ring.KeyType, tables []tableset.TableSpec) error {
	if !ValidKeyspaceName(name) {
		return fmt.Errorf("keyspace name %q: use lower-case letters, digits and '_', starting with a letter", name)
	}
	_, _, err := checkRegistration(ctx, s.pool, name, keyType, tables)
	if err != nil {
		return fmt.Errorf("register tables in keyspace %s: %w", name, err)
	}
	return nil
}

// checkRegistration reads whether keyspace name exists (and has keyType)
// and which of tables are not registered yet (fresh, schema defaulted); a
// table registered elsewhere or with another key is refused.
func checkRegistration(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, name string, keyType ring.KeyType, tables []tableset.TableSpec) (exists bool, fresh []tableset.TableSpec, err error) {
	var have string
	err = q.QueryRow(ctx, `SELECT key_type FROM reshard.keyspaces WHERE name = $1`, name).Scan(&have)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, nil, err
	case ring.KeyType(have) != keyType:
		return false, nil, fmt.Errorf("keyspace %s is keyed by %s; these tables' keys are %s: one keyspace, one key type", name, have, keyType)
	default:
		exists = true
	}
	for _, t := range tables {
		if t.Schema == "" {
			t.Schema = "public"
		}
		var ks, key string
		err := q.QueryRow(ctx, `SELECT keyspace, key_column FROM reshard.keyspace_tables WHERE schema_name = $1 AND table_name = $2`, t.Schema, t.Table).Scan(&ks, &key)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			fresh = append(fresh, t)
		case err != nil:
			return false, nil, err
		case ks != name:
			return false, nil, fmt.Errorf("table %s.%s already belongs to keyspace %s (key %s): a table belongs to one keyspace; leave it out here (reshard keyspace show lists each keyspace's tables)", t.Schema, t.Table, ks, key)
		case key != t.KeyColumn:
			return false, nil, fmt.Errorf("table %s.%s is registered in keyspace %s with key %s, not %s: a registered table keeps its key; give --table %s.%s:%s", t.Schema, t.Table, ks, key, t.KeyColumn, t.Schema, t.Table, key)
		}
	}
	return exists, fresh, nil
}

// SameTables reports whether two lists name the same tables with the same
// keys, in any order; when not, it says what differs.
func SameTables(registered, given []tableset.TableSpec) (bool, string) {
	key := TableKey
	var missing, extra []string
	for _, r := range registered {
		if !slices.ContainsFunc(given, func(g tableset.TableSpec) bool { return key(g) == key(r) }) {
			missing = append(missing, key(r))
		}
	}
	for _, g := range given {
		if !slices.ContainsFunc(registered, func(r tableset.TableSpec) bool { return key(g) == key(r) }) {
			extra = append(extra, key(g))
		}
	}
	if len(missing)+len(extra) == 0 {
		return true, ""
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "leaves out "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		parts = append(parts, "names unregistered "+strings.Join(extra, ", "))
	}
	return false, strings.Join(parts, "; ")
}
