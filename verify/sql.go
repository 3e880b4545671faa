package verify

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// sessionSettings fix every setting that changes the text output of a value,
// so that the canonical row text of a row is the same on both servers.
const sessionSettings = `SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'; ` +
	`SET LOCAL IntervalStyle = 'postgres'; SET LOCAL extra_float_digits = 3; SET LOCAL bytea_output = 'hex'`

// tableSQL renders the statements verify runs against one table. It is pure:
// the same text is sent to source and target.
//
// A chunk is an interval (lo, hi] of the primary key, not of the token: the
// rows of a token range are spread over the whole heap (the heap follows the
// key, the token is a hash of it), so a token-range chunk reads nearly every
// page of the table, and k chunks read it k times. A key interval is one
// index range scan of contiguous pages, the moving-range predicate filters
// the rows there, and all chunks together read the table once — the keyset
// pagination of the copy (DESIGN.md §4.3).
type tableSQL struct {
	t       tableset.Table
	ranges  []ring.Range // normalized
	from    string       // quoted table with alias t
	pkCols  []string     // qualified, quoted
	pkTypes []string
	rowText string // canonical row text: every source column by name, in source order
	token   string
	pred    string // token in ranges
	rangeOf string // index of the range a row's token lies in
}

func newTableSQL(t tableset.Table, ranges []ring.Range) (*tableSQL, error) {
	q := &tableSQL{t: t, ranges: ring.Normalize(ranges), from: t.Quoted() + " AS t", token: t.TokenSQL("t")}
	if len(q.ranges) == 0 {
		return nil, fmt.Errorf("verify %s: no token range to verify", t)
	}
	if len(t.PK) == 0 {
		return nil, fmt.Errorf("verify %s: table has no primary key", t)
	}
	for _, c := range t.PK {
		col, ok := t.Column(c)
		if !ok {
			return nil, fmt.Errorf("verify %s: primary-key column %q is not among the table's columns", t, c)
		}
		q.pkCols = append(q.pkCols, pgx.Identifier{"t", c}.Sanitize())
		q.pkTypes = append(q.pkTypes, col.Type)
	}
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = pgx.Identifier{"t", c.Name}.Sanitize()
	}
	q.rowText = "ROW(" + strings.Join(cols, ", ") + ")::text"
	q.pred = ring.Predicate(q.token, q.ranges)
	if len(q.ranges) == 1 {
		q.rangeOf = "0"
	} else {
		var b strings.Builder
		b.WriteString("CASE")
		for i, r := range q.ranges {
			fmt.Fprintf(&b, " WHEN %s THEN %d", ring.Predicate(q.token, []ring.Range{r}), i)
		}
		b.WriteString(" END")
		q.rangeOf = b.String()
	}
	return q, nil
}

// keyText renders the primary key as a text array.
func (q *tableSQL) keyText() string {
	parts := make([]string, len(q.pkCols))
	for i, c := range q.pkCols {
		parts[i] = c + "::text"
	}
	return "ARRAY[" + strings.Join(parts, ", ") + "]::text[]"
}

func (q *tableSQL) orderBy() string { return strings.Join(q.pkCols, ", ") }

// where renders "key in (lo, hi] AND token in ranges"; a nil bound is open.
// Bounds travel as text parameters cast to the key's types, so any key type
// whose text form round-trips (with sessionSettings) works.
func (q *tableSQL) where(lo, hi []string) (string, []any) {
	var conds []string
	var args []any
	for _, b := range []struct {
		op  string
		key []string
	}{{">", lo}, {"<=", hi}} {
		if b.key == nil {
			continue
		}
		rhs := make([]string, len(b.key))
		for i, v := range b.key {
			args = append(args, v)
			rhs[i] = "CAST($" + strconv.Itoa(len(args)) + "::text AS " + q.pkTypes[i] + ")"
		}
		if len(rhs) == 1 {
			conds = append(conds, q.pkCols[0]+" "+b.op+" "+rhs[0])
		} else {
			conds = append(conds, "("+strings.Join(q.pkCols, ", ")+") "+b.op+" ("+strings.Join(rhs, ", ")+")")
		}
	}
	conds = append(conds, q.pred)
	return strings.Join(conds, " AND "), args
}

// sums is the chunk checksum: per moving range, the row count, the XOR of one
// 64-bit hash of the row text and the sum of a second, independent one (seed
// 1; the low half of seed 0 equals hashtext, seed 1 mixes differently). Both
// are order independent; together a random difference slips through with
// probability about 2^-128. sum(int8) accumulates in 128 bits, so it is
// nearly as cheap as bit_xor. OFFSET 0 keeps the subquery from being
// flattened, which would render the row text (the dominant cost) once per
// hash.
func (q *tableSQL) sums(lo, hi []string) (string, []any) {
	w, args := q.where(lo, hi)
	aggs := "count(*), coalesce(bit_xor(hashtextextended(rt, 0)), 0), coalesce(sum(hashtextextended(rt, 1)), 0)::text"
	if len(q.ranges) == 1 { // grouping by a constant still costs a third of the scan
		return "SELECT 0, " + aggs + " FROM (SELECT " + q.rowText + " AS rt FROM " + q.from + " WHERE " + w + " OFFSET 0) s", args
	}
	return "SELECT r, " + aggs + " FROM (SELECT " + q.rangeOf + " AS r, " + q.rowText + " AS rt FROM " + q.from + " WHERE " + w + " OFFSET 0) s GROUP BY r", args
}

// nth returns the key of the n-th row (0-based) of (lo, hi] in key order.
func (q *tableSQL) nth(lo, hi []string, n int64) (string, []any) {
	w, args := q.where(lo, hi)
	return "SELECT " + q.keyText() + " FROM " + q.from + " WHERE " + w +
		" ORDER BY " + q.orderBy() + " OFFSET " + strconv.FormatInt(n, 10) + " LIMIT 1", args
}

// rows lists the rows of (lo, hi] with their token and both row hashes.
func (q *tableSQL) rows(lo, hi []string) (string, []any) {
	w, args := q.where(lo, hi)
	return "SELECT k, tok, hashtextextended(rt, 0), hashtextextended(rt, 1) FROM (SELECT " + q.keyText() + " AS k, " + q.token + " AS tok, " +
		q.rowText + " AS rt FROM " + q.from + " WHERE " + w + " ORDER BY " + q.orderBy() + " OFFSET 0) s", args
}

// sample lists the keys of the moving rows in a page sample of pct percent.
func (q *tableSQL) sample(pct float64) string {
	return "SELECT " + q.keyText() + " FROM " + q.from + " TABLESAMPLE SYSTEM (" + strconv.FormatFloat(pct, 'f', 6, 64) + ") WHERE " +
		q.pred + " ORDER BY " + q.orderBy()
}

// fraction is the share of the token space the ranges cover.
func (q *tableSQL) fraction() float64 {
	var w float64
	for _, r := range q.ranges {
		w += r.Width()
	}
	return w / 18446744073709551616.0
}

// rangeIndex is the index of the range holding token t, or -1.
func (q *tableSQL) rangeIndex(t int64) int {
	for i, r := range q.ranges {
		if r.Contains(t) {
			return i
		}
	}
	return -1
}
