package verify

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// Built-in type OIDs (pg_type.dat; the same on every server).
const (
	oidBool        = 16
	oidBytea       = 17
	oidChar        = 18
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidOID         = 26
	oidVarchar     = 1043
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidUUID        = 2950
)

// columnValue renders one column of the row hashed by hash_record_extended,
// which hashes each field with its type's own extended hash function — about
// four times cheaper than rendering the row as text and hashing that, and the
// cost of verify is almost all row hashing.
//
// A type's hash is only as fine as its equality, so a column is hashed
// directly only when equal values of its type are identical values: the
// integer types, bool, "char", bytea, uuid, date, time, timestamp and
// timestamptz, and text, varchar and name under the "C" collation (a
// nondeterministic column collation would hash 'A' and 'a' alike). Every
// other type is hashed as its text form under pgsession.Settings (begin pins them), as the row
// text was: numeric (1.5 = 1.50), float (0 = -0), interval ('1 day' = '24
// hours'), timetz, jsonb and arrays compare equal across different values,
// enums hash their OIDs, which differ between servers, and a domain or an
// extension type may have no hash function at all.
func columnValue(col string, typeOID uint32) string {
	switch typeOID {
	case oidText, oidVarchar, oidName:
		return col + ` COLLATE "C"`
	case oidBool, oidBytea, oidChar, oidInt8, oidInt2, oidInt4, oidOID, oidDate, oidTime, oidTimestamp, oidTimestamptz, oidUUID:
		return col
	default:
		return "(" + col + `::text COLLATE "C")`
	}
}

// RowHash is the 64-bit hash verify computes of a row of t (alias names the
// table in the statement): every column by name, in t's order. The capacity
// probe times it.
func RowHash(t tableset.Table, alias string) string {
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = columnValue(pgx.Identifier{alias, c.Name}.Sanitize(), c.TypeOID)
	}
	return "hash_record_extended(ROW(" + strings.Join(cols, ", ") + "), 0)"
}

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
	rowHash string // 64-bit row hash: every source column by name, in source order
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
	q.rowHash = RowHash(t, "t")
	// Many ranges (a move with virtual nodes has dozens): one binary search
	// per row, not an OR of comparisons that each recompute the token —
	// three times faster over 16 ranges.
	q.pred = ring.ScanPredicate(q.token, q.ranges)
	q.rangeOf = "0"
	if len(q.ranges) > 1 {
		q.rangeOf = "(" + ring.BucketSQL(q.token, q.ranges) + " - 1) / 2"
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
// whose text form round-trips (under pgsession.Settings) works.
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

// sums is the chunk checksum: per moving range, the row count, and the XOR
// and the sum of the 64-bit row hashes. Both are order independent; the sum
// (accumulated in 128 bits by sum(int8), nearly as cheap as bit_xor) also
// catches differences that cancel in the XOR, such as a pair of equal hashes.
// A row that differs changes its hash, so a chunk with a difference compares
// equal with probability about 2^-64. OFFSET 0 keeps the subquery from being
// flattened, which would compute the row hash once per aggregate.
func (q *tableSQL) sums(lo, hi []string) (string, []any) {
	w, args := q.where(lo, hi)
	aggs := "count(*), coalesce(bit_xor(h), 0), coalesce(sum(h), 0)::text"
	if len(q.ranges) == 1 { // grouping by a constant still costs a third of the scan
		return "SELECT 0, " + aggs + " FROM (SELECT " + q.rowHash + " AS h FROM " + q.from + " WHERE " + w + " OFFSET 0) s", args
	}
	return "SELECT r, " + aggs + " FROM (SELECT " + q.rangeOf + " AS r, " + q.rowHash + " AS h FROM " + q.from + " WHERE " + w + " OFFSET 0) s GROUP BY r", args
}

// nth returns the key of the n-th row (0-based) of (lo, hi] in key order.
func (q *tableSQL) nth(lo, hi []string, n int64) (string, []any) {
	w, args := q.where(lo, hi)
	return "SELECT " + q.keyText() + " FROM " + q.from + " WHERE " + w +
		" ORDER BY " + q.orderBy() + " OFFSET " + strconv.FormatInt(n, 10) + " LIMIT 1", args
}

// rows lists the rows of (lo, hi] with their token and row hash.
func (q *tableSQL) rows(lo, hi []string) (string, []any) {
	w, args := q.where(lo, hi)
	return "SELECT " + q.keyText() + ", " + q.token + ", " + q.rowHash + " FROM " + q.from + " WHERE " + w + " ORDER BY " + q.orderBy(), args
}

// sample lists the keys of the moving rows in a page sample of pct percent.
func (q *tableSQL) sample(pct float64) string {
	return "SELECT " + q.keyText() + " FROM " + q.from + " TABLESAMPLE SYSTEM (" + strconv.FormatFloat(pct, 'f', 6, 64) + ") WHERE " +
		q.pred + " ORDER BY " + q.orderBy()
}

// fraction is the share of the token space the ranges cover.
func (q *tableSQL) fraction() float64 { return ring.SpaceFraction(q.ranges) }

// rangeIndex is the index of the range holding token t, or -1.
func (q *tableSQL) rangeIndex(t int64) int {
	for i, r := range q.ranges {
		if r.Contains(t) {
			return i
		}
	}
	return -1
}
