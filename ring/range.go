package ring

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// MinToken and MaxToken bound the token space, a circle of int64.
const (
	MinToken int64 = math.MinInt64
	MaxToken int64 = math.MaxInt64
)

// Range is a token range (Lo, Hi]: lower bound exclusive, upper bound
// inclusive, the one convention of every component (router, copy, CDC
// filter, verify, fence, cleanup).
//
// A range never wraps: Lo < Hi always. A wrapping ring range (last, first] is
// two Ranges, (last, MaxToken] and [MinToken, first]. Because nothing lies
// below MinToken, a Range whose Lo is MinToken includes MinToken itself; that
// is the only way to name the token MinToken, and it is why no vnode token may
// equal MinToken (see Ring).
type Range struct {
	Lo int64 `json:"lo"`
	Hi int64 `json:"hi"`
}

// Contains reports whether token t lies in r.
func (r Range) Contains(t int64) bool {
	if t > r.Hi {
		return false
	}
	return t > r.Lo || (r.Lo == MinToken && t == MinToken)
}

// Valid reports whether r is a non-empty, non-wrapping range.
func (r Range) Valid() bool { return r.Lo < r.Hi }

// Width is the number of tokens in r, as a float64 (the space has 2^64 tokens).
func (r Range) Width() float64 {
	w := float64(uint64(r.Hi - r.Lo))
	if r.Lo == MinToken {
		w++
	}
	return w
}

// SpaceFraction is the fraction of the token space rs cover (rs must not
// overlap: Normalize them first), for messages as a share of the space.
func SpaceFraction(rs []Range) float64 {
	var w float64
	for _, r := range rs {
		w += r.Width()
	}
	return w / twoTo64
}

// String renders r as "(lo,hi]" (or "[lo,hi]" when it includes MinToken).
func (r Range) String() string {
	open := "("
	if r.Lo == MinToken {
		open = "["
	}
	return open + strconv.FormatInt(r.Lo, 10) + "," + strconv.FormatInt(r.Hi, 10) + "]"
}

// ParseRange reads a range as the CLI takes it, "lo:hi", or as String
// prints it, "(lo,hi]" ("[lo,hi]" only with lo = MinToken): lo exclusive,
// hi inclusive, as Range.
func ParseRange(s string) (Range, error) {
	const want = "want lo:hi or (lo,hi] (lo exclusive, hi inclusive, int64 tokens)"
	t := strings.TrimSpace(s)
	var lo, hi string
	var ok, closedLo bool
	if strings.HasPrefix(t, "(") || strings.HasPrefix(t, "[") {
		if !strings.HasSuffix(t, "]") {
			return Range{}, fmt.Errorf("range %q: the upper bound is inclusive: end it with ']'; %s", s, want)
		}
		closedLo = t[0] == '['
		lo, hi, ok = strings.Cut(t[1:len(t)-1], ",")
	} else {
		lo, hi, ok = strings.Cut(t, ":")
	}
	if !ok {
		return Range{}, fmt.Errorf("range %q: %s", s, want)
	}
	l, err := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
	if err != nil {
		return Range{}, fmt.Errorf("range %q: lower bound: %w (tokens are int64, %d to %d)", s, err, MinToken, MaxToken)
	}
	h, err := strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
	if err != nil {
		return Range{}, fmt.Errorf("range %q: upper bound: %w (tokens are int64, %d to %d)", s, err, MinToken, MaxToken)
	}
	if closedLo && l != MinToken {
		return Range{}, fmt.Errorf("range %q: the lower bound is exclusive: write (%d,%d] (only a range from %d includes its lower bound)", s, l, h, MinToken)
	}
	r := Range{Lo: l, Hi: h}
	if !r.Valid() {
		return Range{}, fmt.Errorf("range %q: lower bound must be below upper bound; write a wrapping range as two ranges lo:%d and %d:hi", s, MaxToken, MinToken)
	}
	return r, nil
}

// Normalize sorts ranges and merges those that overlap or touch, dropping
// empty ones. The result covers exactly the same tokens.
func Normalize(rs []Range) []Range {
	out := make([]Range, 0, len(rs))
	for _, r := range rs {
		if r.Valid() {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Range) int {
		switch {
		case a.Lo < b.Lo:
			return -1
		case a.Lo > b.Lo:
			return 1
		}
		return 0
	})
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && r.Lo <= merged[n-1].Hi {
			if r.Hi > merged[n-1].Hi {
				merged[n-1].Hi = r.Hi
			}
			continue
		}
		merged = append(merged, r)
	}
	return merged
}

// Buckets renders rs for PostgreSQL's width_bucket(expr, thresholds): with
// the returned array literal, width_bucket(expr, array) is odd exactly when
// expr lies in one of the normalized ranges, and (width_bucket - 1) / 2 is
// that range's index in Normalize(rs). One binary search per row instead of
// an OR of 2·len(rs) comparisons, each recomputing the token: for the dozens
// of ranges a move with virtual nodes has, a large part of a scan's cost.
// An empty set renders an array no token reaches the first bucket of.
func Buckets(rs []Range) string {
	rs = Normalize(rs)
	th := make([]string, 0, 2*len(rs))
	for _, r := range rs {
		// (lo, hi] is [lo+1, hi+1) on integers; a range from MinToken
		// includes MinToken itself (see Predicate).
		lo := r.Lo
		if lo != MinToken {
			lo++
		}
		th = append(th, strconv.FormatInt(lo, 10))
		if r.Hi != MaxToken { // else the last bucket is open-ended
			th = append(th, strconv.FormatInt(r.Hi+1, 10))
		}
	}
	if len(th) == 0 {
		// width_bucket refuses an empty array: bucket 1 starts past every token.
		return "'{" + strconv.FormatInt(MaxToken, 10) + "," + strconv.FormatInt(MaxToken, 10) + "}'::bigint[]"
	}
	return "'{" + strings.Join(th, ",") + "}'::bigint[]"
}

// BucketSQL is width_bucket(expr, Buckets(rs)): odd exactly when the token
// expression expr lies in rs, and (BucketSQL - 1) / 2 is then the index of
// its range in Normalize(rs).
func BucketSQL(expr string, rs []Range) string {
	return "width_bucket(" + expr + ", " + Buckets(rs) + ")"
}

// ScanPredicate is Predicate for a statement that tests many rows: for
// several ranges, one binary search per row (BucketSQL) instead of an OR that
// computes the token again for every bound. Predicate keeps the plain
// comparisons, which an index on the token expression can serve and which
// publication row filters and fence triggers use.
func ScanPredicate(expr string, rs []Range) string {
	if len(Normalize(rs)) > 1 {
		return BucketSQL(expr, rs) + " % 2 = 1"
	}
	return Predicate(expr, rs)
}

// ContainsAny reports whether t lies in any of rs.
func ContainsAny(rs []Range, t int64) bool {
	for _, r := range rs {
		if r.Contains(t) {
			return true
		}
	}
	return false
}

// Predicate renders the SQL condition "expr in rs" for a set of ranges, where
// expr is a token expression (see TokenSQL). Literal int64 bounds only, so the
// result is safe to embed in a statement and accepted by PG15 publication
// row filters. An empty set renders "false".
func Predicate(expr string, rs []Range) string {
	rs = Normalize(rs)
	if len(rs) == 0 {
		return "false"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		var conds []string
		if r.Lo != MinToken {
			conds = append(conds, expr+" > "+strconv.FormatInt(r.Lo, 10))
		}
		if r.Hi != MaxToken {
			conds = append(conds, expr+" <= "+strconv.FormatInt(r.Hi, 10))
		}
		switch len(conds) {
		case 0:
			return "true"
		case 1:
			parts = append(parts, conds[0])
		default:
			parts = append(parts, "("+conds[0]+" AND "+conds[1]+")")
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

// KeyType is the type family of a table set's shard key; it picks the token
// function (DESIGN.md §1).
type KeyType string

const (
	KeyInt  KeyType = "bigint" // smallint, integer, bigint: hashint8extended
	KeyText KeyType = "text"   // text, varchar: hashtextextended
	KeyUUID KeyType = "uuid"   // uuid: uuid_hash_extended
)

// ParseKeyType accepts the names users and PostgreSQL use for key types.
func ParseKeyType(s string) (KeyType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bigint", "int8", "integer", "int", "int4", "smallint", "int2":
		return KeyInt, nil
	case "text", "varchar", "character varying":
		return KeyText, nil
	case "uuid":
		return KeyUUID, nil
	}
	return "", fmt.Errorf("key type %q: want bigint, integer, smallint, text, varchar or uuid", s)
}

// TokenSQL renders the SQL token expression of a key column: the immutable
// built-in hash PostgreSQL hash partitioning uses, with seed 0. The column name
// is quoted; qualifier, when not empty, is a table alias to prefix it with.
func TokenSQL(kt KeyType, qualifier, column string) string {
	col := quoteIdent(column)
	if qualifier != "" {
		col = quoteIdent(qualifier) + "." + quoteIdent(column)
	}
	switch kt {
	case KeyText:
		return "hashtextextended(" + col + ", 0)"
	case KeyUUID:
		return "uuid_hash_extended(" + col + ", 0)"
	default:
		return "hashint8extended(" + col + ", 0)"
	}
}

// Subtract returns the parts of r outside every range of cut.
func Subtract(r Range, cut []Range) []Range {
	out := []Range{r}
	for _, c := range Normalize(cut) {
		var next []Range
		for _, o := range out {
			if c.Hi <= o.Lo || o.Hi <= c.Lo {
				next = append(next, o)
				continue
			}
			if o.Lo < c.Lo {
				next = append(next, Range{Lo: o.Lo, Hi: c.Lo})
			}
			if c.Hi < o.Hi {
				next = append(next, Range{Lo: c.Hi, Hi: o.Hi})
			}
		}
		out = next
	}
	return out
}

// quoteIdent quotes an SQL identifier as pgx.Identifier.Sanitize does
// (double quotes doubled, NUL bytes dropped); ring imports nothing outside
// the standard library.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `"`, `""`) + `"`
}
