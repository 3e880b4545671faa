// Package tableset describes the tables that move together: a table set is a
// list of tables sharing one logical shard key (users.id, orders.user_id),
// so rows with the same key live on the same shard. It reads each table's
// shape from the catalog (columns, primary key, replica identity) for the
// copy, the applier, verify and the fences.
//
// Invariant: every table of a set has a primary key and a shard-key column,
// and all key columns share one key type (one token function per set). A
// registered table is also Shardable: a plain table whose key is NOT NULL
// and, for text, compared as bytes (a deterministic collation).
//
// Schema changes: ddl.go classifies the statements schema apply accepts
// (pure) and ddlapply.go runs them on every shard of a keyspace; drift.go
// is how the copy, the appliers and verify take the columns both shards
// have, and the error that makes a move wait while they disagree.
package tableset

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
)

// Spec is what a user configures: the tables of a set and each one's key
// column (the plain values live in package keyspace).
type Spec = keyspace.Spec

// TableSpec names one table and its shard-key column.
type TableSpec = keyspace.TableSpec

// Column is one live column of a table, in attribute order.
type Column struct {
	Name      string `json:"name"`
	Type      string `json:"type"` // format_type(atttypid, atttypmod)
	TypeOID   uint32 `json:"type_oid"`
	NotNull   bool   `json:"not_null"`
	Generated bool   `json:"generated"` // GENERATED ALWAYS AS (...) STORED: never written
	Identity  bool   `json:"identity"`  // GENERATED {ALWAYS|BY DEFAULT} AS IDENTITY: a per-shard sequence
	Default   string `json:"default,omitempty"`
	// SourceType is set by Shared when the source's type differs (a
	// widening on its way): a copy reads the column cast to Type.
	SourceType string `json:"source_type,omitempty"`
}

// Table is a table's shape as read from one server's catalog.
type Table struct {
	Schema    string       `json:"schema"`
	Name      string       `json:"name"`
	KeyColumn string       `json:"key"`
	KeyType   ring.KeyType `json:"key_type"`
	Columns   []Column     `json:"columns"`
	PK        []string     `json:"pk"`
	// ReplicaIdentity is pg_class.relreplident: d(efault: the primary key),
	// f(ull), i(ndex), n(othing).
	ReplicaIdentity string   `json:"replica_identity"`
	IdentityColumns []string `json:"identity_columns"`
	// Partitioned: a partitioned table (relkind 'p'), which reshard cannot
	// shard (Shardable says why).
	Partitioned bool `json:"partitioned,omitempty"`
	// KeyCollation names the key column's collation when it is
	// nondeterministic (empty otherwise): Shardable refuses it.
	KeyCollation string `json:"key_collation,omitempty"`
}

// Set is a resolved table set.
type Set struct {
	Name    string       `json:"name"`
	KeyType ring.KeyType `json:"key_type"`
	Tables  []Table      `json:"tables"`
}

// Ident is the table's quoted-ready identifier.
func (t Table) Ident() pgx.Identifier { return pgx.Identifier{t.Schema, t.Name} }

// Quoted is the table's name, quoted for SQL.
func (t Table) Quoted() string { return t.Ident().Sanitize() }

// String is schema.table, for messages.
func (t Table) String() string { return t.Schema + "." + t.Name }

// TokenSQL is the token expression of the table's key, qualified by alias
// when not empty.
func (t Table) TokenSQL(alias string) string { return ring.TokenSQL(t.KeyType, alias, t.KeyColumn) }

// KeyInIdentity reports whether the shard key is part of the replica identity,
// so that DELETE and key-changing UPDATE messages carry it and a PG15 row
// filter may use it.
func (t Table) KeyInIdentity() bool {
	for _, c := range t.IdentityColumns {
		if c == t.KeyColumn {
			return true
		}
	}
	return false
}

// KeyInPK reports whether the shard key is part of the primary key.
func (t Table) KeyInPK() bool {
	for _, c := range t.PK {
		if c == t.KeyColumn {
			return true
		}
	}
	return false
}

// WritableColumns are the columns a copy or an applier writes (not generated).
func (t Table) WritableColumns() []Column {
	out := make([]Column, 0, len(t.Columns))
	for _, c := range t.Columns {
		if !c.Generated {
			out = append(out, c)
		}
	}
	return out
}

// Column returns the named column.
func (t Table) Column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// Querier is what Introspect needs: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Introspect reads the shape of every table of spec from one server. Errors
// name the table and the fix. where names the server in messages ("source
// shard1").
func Introspect(ctx context.Context, q Querier, spec Spec, where string) (Set, error) {
	if len(spec.Tables) == 0 {
		return Set{}, fmt.Errorf("table set %q lists no tables: add at least one table with its key column", spec.Name)
	}
	set := Set{Name: spec.Name}
	for _, ts := range spec.Tables {
		t, err := introspectTable(ctx, q, ts, where)
		if err != nil {
			return Set{}, err
		}
		if set.KeyType == "" {
			set.KeyType = t.KeyType
		} else if t.KeyType != set.KeyType {
			return Set{}, fmt.Errorf("table set %q on %s: key %s.%s is %s but %s.%s is %s: all tables of a set must share one key type",
				spec.Name, where, t, t.KeyColumn, t.KeyType, set.Tables[0], set.Tables[0].KeyColumn, set.KeyType)
		}
		set.Tables = append(set.Tables, t)
	}
	return set, nil
}

func introspectTable(ctx context.Context, q Querier, ts TableSpec, where string) (Table, error) {
	t := Table{Schema: ts.Schema, Name: ts.Table, KeyColumn: ts.KeyColumn}
	if t.Schema == "" {
		t.Schema = "public"
	}
	if t.Name == "" || t.KeyColumn == "" {
		return Table{}, fmt.Errorf("table set entry %q: both the table and its key column must be given", t.Schema+"."+t.Name)
	}
	var relid uint32
	err := q.QueryRow(ctx, `
		SELECT c.oid, c.relreplident::text, c.relkind = 'p'
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Name).Scan(&relid, &t.ReplicaIdentity, &t.Partitioned)
	if errors.Is(err, pgx.ErrNoRows) {
		return Table{}, &Problem{Check: CheckTable, Shard: where, Table: t.String(),
			Problem: fmt.Sprintf("table %s does not exist on %s", t, where),
			Fix:     "create it there with the same schema as the other shards"}
	}
	if err != nil {
		return Table{}, fmt.Errorf("read catalog of %s on %s: %w", t, where, err)
	}
	rows, err := q.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid, a.attnotnull,
		       a.attgenerated <> '', a.attidentity <> '', coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, relid)
	if err != nil {
		return Table{}, fmt.Errorf("read columns of %s on %s: %w", t, where, err)
	}
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Type, &c.TypeOID, &c.NotNull, &c.Generated, &c.Identity, &c.Default); err != nil {
			rows.Close()
			return Table{}, err
		}
		t.Columns = append(t.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return Table{}, fmt.Errorf("read columns of %s on %s: %w", t, where, err)
	}
	key, ok := t.Column(t.KeyColumn)
	if !ok {
		return Table{}, &Problem{Check: CheckKey, Shard: where, Table: t.String(),
			Problem: fmt.Sprintf("table %s on %s has no column %q", t, where, t.KeyColumn),
			Fix:     "name its shard-key column in the table set"}
	}
	kt, err := ring.ParseKeyType(baseType(key.Type))
	if err != nil {
		return Table{}, &Problem{Check: CheckKey, Shard: where, Table: t.String(),
			Problem: fmt.Sprintf("shard key %s.%s on %s is %s, which reshard cannot hash", t, t.KeyColumn, where, key.Type),
			Fix:     "use a smallint, integer, bigint, text, varchar or uuid key"}
	}
	t.KeyType = kt
	err = q.QueryRow(ctx, `
		SELECT coalesce((SELECT quote_ident(n.nspname) || '.' || quote_ident(co.collname)
		                 FROM pg_collation co JOIN pg_namespace n ON n.oid = co.collnamespace
		                 WHERE co.oid = a.attcollation AND NOT co.collisdeterministic), '')
		FROM pg_attribute a WHERE a.attrelid = $1 AND a.attname = $2`, relid, t.KeyColumn).Scan(&t.KeyCollation)
	if err != nil {
		return Table{}, fmt.Errorf("read the collation of %s.%s on %s: %w", t, t.KeyColumn, where, err)
	}
	if t.PK, err = indexColumns(ctx, q, `SELECT indexrelid FROM pg_index WHERE indrelid = $1 AND indisprimary`, relid); err != nil {
		return Table{}, fmt.Errorf("read primary key of %s on %s: %w", t, where, err)
	}
	if len(t.PK) == 0 {
		return Table{}, &Problem{Check: CheckPrimaryKey, Shard: where, Table: t.String(),
			Problem: fmt.Sprintf("table %s on %s has no primary key; reshard needs it to copy idempotently and to apply changes", t, where),
			Fix:     fmt.Sprintf("add one: ALTER TABLE %s ADD PRIMARY KEY (...)", t.Quoted())}
	}
	switch t.ReplicaIdentity {
	case "d":
		t.IdentityColumns = t.PK
	case "f":
		for _, c := range t.Columns {
			t.IdentityColumns = append(t.IdentityColumns, c.Name)
		}
	case "i":
		if t.IdentityColumns, err = indexColumns(ctx, q, `SELECT indexrelid FROM pg_index WHERE indrelid = $1 AND indisreplident`, relid); err != nil {
			return Table{}, fmt.Errorf("read replica identity of %s on %s: %w", t, where, err)
		}
	}
	return t, nil
}

// baseType strips a length modifier: "character varying(20)" → "character varying".
func baseType(s string) string {
	if i := strings.IndexByte(s, '('); i >= 0 {
		return s[:i]
	}
	return s
}

func indexColumns(ctx context.Context, q Querier, findIndex string, relid uint32) ([]string, error) {
	var idx uint32
	if err := q.QueryRow(ctx, findIndex, relid).Scan(&idx); errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `
		SELECT a.attname FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indexrelid = $1 ORDER BY k.ord`, idx)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
