package backfill

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// Order is how a unit pages through its rows.
type Order string

const (
	// OrderAuto picks OrderToken when the source has the token index and the
	// range is at most 1/16 of the token space, else OrderPK.
	OrderAuto Order = ""
	// OrderPK pages by primary key: an index scan of the whole table that
	// keeps the range's rows. Needs no extra index; reads every row once.
	OrderPK Order = "pk"
	// OrderToken pages by (token, primary key) through the token index: reads
	// only the range's rows.
	OrderToken Order = "token"
)

// position is where a unit stands: after the row (token, pk).
type position struct {
	token int64
	pk    []string // text form of the primary key values; nil at the start
}

// columnList is the quoted, comma-separated list of cols, each qualified by
// alias when it is not empty.
func columnList(alias string, cols []string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		if alias != "" {
			parts[i] = pgx.Identifier{alias, c}.Sanitize()
		} else {
			parts[i] = pgx.Identifier{c}.Sanitize()
		}
	}
	return strings.Join(parts, ", ")
}

func writable(t tableset.Table) []string {
	cs := t.WritableColumns()
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// selectList is the source's read of the writable columns: a column whose
// type differs on the target (a widening on its way: tableset.Shared) is
// cast to the target's type, which the binary COPY stream must carry.
func selectList(t tableset.Table) string {
	var parts []string
	for _, c := range t.WritableColumns() {
		q := pgx.Identifier{c.Name}.Sanitize()
		if c.SourceType != "" {
			q = q + "::" + c.Type + " AS " + q
		}
		parts = append(parts, q)
	}
	return strings.Join(parts, ", ")
}

// quoteLiteral renders s as an SQL string literal, whatever
// standard_conforming_strings says.
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// pkLiterals renders the text values of t's primary key as typed literals.
func pkLiterals(t tableset.Table, vals []string) string {
	parts := make([]string, len(t.PK))
	for i, c := range t.PK {
		col, _ := t.Column(c)
		parts[i] = quoteLiteral(vals[i]) + "::" + col.Type
	}
	return strings.Join(parts, ", ")
}

// chunkSQL is the statement that reads the next chunk of t in parts after pos:
// the writable columns, then the extras — the token (OrderToken only) and the
// primary key as text — that say where the chunk ended. COPY takes no
// parameters, so the position is inlined as typed literals.
func chunkSQL(t tableset.Table, parts []ring.Range, order Order, pos position, limit int) string {
	return boundedChunkSQL(t, parts, order, pos, nil, limit)
}

// boundedChunkSQL is chunkSQL's statement, reading only up to the primary
// key end when it is not nil (OrderPK), with no limit then.
func boundedChunkSQL(t tableset.Table, parts []ring.Range, order Order, pos position, end []string, limit int) string {
	lim := strconv.Itoa(limit)
	if end != nil {
		lim = "ALL"
	}
	return chunkStatement(t, parts, order, pos, end, lim)
}

// probeChunkSQL is the statement of a probe's chunk (Probe): at most limit
// rows after pos and up to the primary key end (not bounded when nil).
func probeChunkSQL(t tableset.Table, parts []ring.Range, pos position, end []string, limit int) string {
	return chunkStatement(t, parts, OrderPK, pos, end, strconv.Itoa(limit))
}

// chunkStatement renders the chunk statements: the rows after pos, up to
// end when not nil, LIMIT lim.
func chunkStatement(t tableset.Table, parts []ring.Range, order Order, pos position, end []string, lim string) string {
	tok := t.TokenSQL("")
	pk := columnList("", t.PK)
	var extras []string
	if order == OrderToken {
		extras = append(extras, tok)
	}
	for _, c := range t.PK {
		extras = append(extras, pgx.Identifier{c}.Sanitize()+"::text")
	}
	for i := range extras { // named apart from the columns, which ORDER BY means
		extras[i] += fmt.Sprintf(` AS "reshard_extra_%d"`, i)
	}
	where := ring.ScanPredicate(tok, parts)
	if pos.pk != nil {
		after := fmt.Sprintf("(%s) > (%s)", pk, pkLiterals(t, pos.pk))
		if order == OrderToken {
			at := strconv.FormatInt(pos.token, 10)
			after = fmt.Sprintf("%s >= %s AND (%s > %s OR %s)", tok, at, tok, at, after)
		}
		where += " AND " + after
	}
	if end != nil {
		where += fmt.Sprintf(" AND (%s) <= (%s)", pk, pkLiterals(t, end))
	}
	orderBy := pk
	if order == OrderToken {
		orderBy = tok + ", " + pk
	}
	return fmt.Sprintf("COPY (SELECT %s, %s FROM %s WHERE %s ORDER BY %s LIMIT %s) TO STDOUT (FORMAT binary)",
		selectList(t), strings.Join(extras, ", "), t.Quoted(), where, orderBy, lim)
}

// stageName is the session's temporary staging table of t.
func stageName(t tableset.Table) string {
	return pgx.Identifier{"pg_temp", "reshard_stage_" + strconv.FormatUint(uint64(fnv32(t.String())), 16)}.Sanitize()
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// stageSQL creates the staging table: the writable columns of t with their
// exact types and no constraints, emptied at every commit.
func stageSQL(t tableset.Table) string {
	return fmt.Sprintf("CREATE TEMP TABLE IF NOT EXISTS %s ON COMMIT DELETE ROWS AS SELECT %s FROM %s WITH NO DATA",
		stageName(t), columnList("", writable(t)), t.Quoted())
}

// copyInSQL loads a binary COPY stream of t's writable columns into into.
func copyInSQL(into string, t tableset.Table) string {
	return fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", into, columnList("", writable(t)))
}

// upsertSQL writes the staged rows over t: a full-row upsert that only ever
// overwrites a row whose existing key is in the moving ranges. A conflicting
// row outside them is left alone and shows up as a missing row count.
func upsertSQL(t tableset.Table, moving []ring.Range) string {
	cols := writable(t)
	var set []string
	for _, c := range cols {
		if !isPK(t, c) {
			set = append(set, fmt.Sprintf("%s = EXCLUDED.%s", pgx.Identifier{c}.Sanitize(), pgx.Identifier{c}.Sanitize()))
		}
	}
	if len(set) == 0 { // every column is in the key: nothing to update but the conflict must still be checked
		c := pgx.Identifier{t.PK[0]}.Sanitize()
		set = append(set, c+" = EXCLUDED."+c)
	}
	return fmt.Sprintf("INSERT INTO %s AS x (%s) SELECT %s FROM %s ON CONFLICT (%s) DO UPDATE SET %s WHERE %s",
		t.Quoted(), columnList("", cols), columnList("", cols), stageName(t), columnList("", t.PK),
		strings.Join(set, ", "), ring.Predicate(t.TokenSQL("x"), moving))
}

// collisionSQL finds a staged row whose primary key belongs to a target row
// outside the moving ranges.
func collisionSQL(t tableset.Table, moving []ring.Range) string {
	var on, key []string
	for _, c := range t.PK {
		on = append(on, fmt.Sprintf("%s = %s", pgx.Identifier{"s", c}.Sanitize(), pgx.Identifier{"x", c}.Sanitize()))
		key = append(key, pgx.Identifier{"x", c}.Sanitize()+"::text")
	}
	return fmt.Sprintf("SELECT ARRAY[%s], %s::text FROM %s s JOIN %s x ON %s WHERE NOT (%s) LIMIT 1",
		strings.Join(key, ", "), pgx.Identifier{"x", t.KeyColumn}.Sanitize(), stageName(t), t.Quoted(),
		strings.Join(on, " AND "), ring.Predicate(t.TokenSQL("x"), moving))
}

func isPK(t tableset.Table, col string) bool {
	for _, c := range t.PK {
		if c == col {
			return true
		}
	}
	return false
}

// chunkEndSQL reads the primary key of the n-th row of t in parts after
// pos (by primary key): the end of the next chunk of a copy beside its
// stream, fixed before the chunk is read. No row: the chunk runs to the end.
func chunkEndSQL(t tableset.Table, parts []ring.Range, pos position, n int) string {
	pk := columnList("", t.PK)
	key := make([]string, len(t.PK))
	for i, c := range t.PK {
		key[i] = pgx.Identifier{c}.Sanitize() + "::text"
	}
	where := ring.ScanPredicate(t.TokenSQL(""), parts)
	if pos.pk != nil {
		where += fmt.Sprintf(" AND (%s) > (%s)", pk, pkLiterals(t, pos.pk))
	}
	return fmt.Sprintf("SELECT ARRAY[%s] FROM %s WHERE %s ORDER BY %s OFFSET %d LIMIT 1",
		strings.Join(key, ", "), t.Quoted(), where, pk, max(n-1, 0))
}

// typedKey is the primary key held in the text[] expr, cast back to t's
// key types: a row value that compares as the copy's ORDER BY does.
func typedKey(t tableset.Table, expr string) string {
	parts := make([]string, len(t.PK))
	for i, c := range t.PK {
		col, _ := t.Column(c)
		parts[i] = fmt.Sprintf("(%s)[%d]::%s", expr, i+1, col.Type)
	}
	return "ROW(" + strings.Join(parts, ", ") + ")"
}

// markReadingSQL records, before a chunk's snapshot is taken, that the
// chunk ending at $5 (NULL: at the table's end) is being read. reading_pk
// never moves back: a rerun after a kill may fix a nearer end than the
// killed run's, whose chunk the stream may still be holding for.
func markReadingSQL(t tableset.Table) string {
	return fmt.Sprintf(`UPDATE reshard.copy_checkpoint AS c SET
		reading_pk = CASE WHEN $5::text[] IS NULL THEN c.reading_pk
			WHEN c.reading_pk IS NULL OR %s > %s THEN $5::text[] ELSE c.reading_pk END,
		reading_all = c.reading_all OR $5::text[] IS NULL, updated_at = now()
		WHERE move = $1 AND table_name = $2 AND range_lo = $3 AND range_hi = $4 AND NOT done`,
		typedKey(t, "$5::text[]"), typedKey(t, "c.reading_pk"))
}
