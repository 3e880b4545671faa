package tableset

import (
	"fmt"
	"strings"
)

// A running move follows additive schema changes (DESIGN.md §7): the copy,
// the appliers and verify take a table's columns by name, those both shards
// have. A column one shard has and the other lacks is either a change still
// on its way (schema apply reaches the shards one after the other) or one
// made by hand on a single shard; either way the move waits for the shards
// to agree, saying which shard lacks which column and the command that
// completes the change, and resumes by itself once they do.

// ColumnWaitError says that a move waits for a shard to get (or lose)
// columns: Lacking lacks Columns, which Has has. Retryable: it ends once
// the shards agree.
type ColumnWaitError struct {
	Keyspace string
	Table    Table
	// Has has the columns, Lacking lacks them (shard names as the caller
	// knows them: "shard5", "target shard5").
	Has, Lacking string
	Columns      []Column
	// Why: what waits ("the copy", "the applier", "verify").
	Why string
	// Retyped: the shards have Columns with different types; Columns
	// carry the type on Has.
	Retyped bool
}

// Retryable: the shards' schemas are on their way to agree.
func (e *ColumnWaitError) Retryable() bool { return true }

func (e *ColumnWaitError) Error() string {
	var names, adds, drops []string
	for _, c := range e.Columns {
		names = append(names, c.Name)
		add := "ADD COLUMN " + plainIdent(c.Name)
		if c.Type != "" {
			add += " " + c.Type
		}
		adds = append(adds, add)
		drops = append(drops, "DROP COLUMN "+plainIdent(c.Name))
	}
	ks := ""
	if e.Keyspace != "" {
		ks = " --keyspace " + e.Keyspace
	}
	table := plainIdent(e.Table.Schema) + "." + plainIdent(e.Table.Name)
	if e.Retyped {
		var alters []string
		for _, c := range e.Columns {
			alters = append(alters, "ALTER COLUMN "+plainIdent(c.Name)+" TYPE "+c.Type)
		}
		return fmt.Sprintf("%s waits for %s to agree with %s on the type of column %s of %s: run reshard schema apply%s 'ALTER TABLE %s %s'; the move resumes by itself once the shards agree",
			e.Why, e.Lacking, e.Has, strings.Join(names, ", "), e.Table, ks, table, strings.Join(alters, ", "))
	}
	return fmt.Sprintf("%s waits for %s to get column %s of %s, which %s has: run reshard schema apply%s 'ALTER TABLE %s %s' (or, if the column is being dropped: reshard schema apply%s 'ALTER TABLE %s %s'); the move resumes by itself once the shards agree",
		e.Why, e.Lacking, strings.Join(names, ", "), e.Table, e.Has, ks, table, strings.Join(adds, ", "), ks, table, strings.Join(drops, ", "))
}

// plainIdent is s as an SQL identifier, quoted only when it must be.
func plainIdent(s string) string {
	for i, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return quoteIdent(s)
		}
	}
	if s == "" || sqlReserved[s] {
		return quoteIdent(s)
	}
	return s
}

// sqlReserved are the reserved words likely as column names.
var sqlReserved = map[string]bool{"all": true, "and": true, "any": true, "array": true, "as": true, "asc": true, "case": true, "check": true, "column": true,
	"constraint": true, "create": true, "default": true, "desc": true, "distinct": true, "do": true, "else": true, "end": true, "for": true, "foreign": true,
	"from": true, "grant": true, "group": true, "having": true, "in": true, "into": true, "limit": true, "not": true, "null": true, "offset": true, "on": true,
	"only": true, "or": true, "order": true, "primary": true, "references": true, "select": true, "table": true, "then": true, "to": true, "true": true,
	"false": true, "union": true, "unique": true, "user": true, "using": true, "when": true, "where": true, "with": true}

// OnlyIn lists the columns of a (generated ones left out) that b lacks, by
// name.
func OnlyIn(a, b Table) []Column {
	var out []Column
	for _, c := range a.Columns {
		if _, ok := b.Column(c.Name); !ok && !c.Generated {
			out = append(out, c)
		}
	}
	return out
}

// Shared is the table as both shards have it: src's table with the columns
// dst has too, by name, in src's order, each typed as on dst, with
// SourceType set where src's type differs (a widening on its way: the
// copy casts to dst's type).
func Shared(src, dst Table) Table {
	out := src
	out.Columns = nil
	for _, c := range src.Columns {
		d, ok := dst.Column(c.Name)
		if !ok {
			continue
		}
		d.SourceType = ""
		if c.Type != d.Type {
			d.SourceType = c.Type
		}
		d.Generated = d.Generated || c.Generated
		out.Columns = append(out.Columns, d)
	}
	return out
}

// Disagree is why two shapes of a table cannot be compared column by column
// (verify): a column one side lacks (either way), or a column whose type
// differs; nil when they agree.
func Disagree(keyspace string, src, dst Table, srcName, dstName, why string) *ColumnWaitError {
	if c := OnlyIn(src, dst); len(c) > 0 {
		return &ColumnWaitError{Keyspace: keyspace, Table: src, Has: srcName, Lacking: dstName, Columns: c, Why: why}
	}
	if c := OnlyIn(dst, src); len(c) > 0 {
		return &ColumnWaitError{Keyspace: keyspace, Table: src, Has: dstName, Lacking: srcName, Columns: c, Why: why}
	}
	var retyped []Column
	for _, c := range src.Columns {
		if d, ok := dst.Column(c.Name); ok && d.TypeOID != c.TypeOID {
			retyped = append(retyped, d)
		}
	}
	if len(retyped) > 0 {
		// The target's type: schema apply reaches the targets first.
		return &ColumnWaitError{Keyspace: keyspace, Table: src, Has: dstName, Lacking: srcName, Columns: retyped, Why: why, Retyped: true}
	}
	return nil
}
