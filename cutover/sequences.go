package cutover

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/reshard/reshard/tableset"
)

// SequenceAdvance is one sequence a cutover moved past the values its column
// holds on the new owner.
type SequenceAdvance struct {
	Table, Column, Sequence string
	// From is the value the sequence would have issued next; To the one it
	// was set to (the next value issued is past it).
	From, To int64
}

// ownedSequences lists, for each table of set on the connected shard, the
// sequences its columns draw from: identity columns and columns owning a
// sequence (serial, or OWNED BY). Read from the catalog at the time of the
// call, not from the set, so an identity added after the plan counts too.
const ownedSequences = `
SELECT a.attname, s.oid::regclass::text, q.seqincrement
FROM pg_depend d
JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
JOIN pg_sequence q ON q.seqrelid = s.oid
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
  AND d.refobjid = $1::regclass AND d.deptype IN ('a', 'i')
ORDER BY a.attnum`

// AdvanceSequences sets every sequence owned by a column of a table of set,
// on the shard behind q, past every value that column holds there: an
// ascending sequence past max(column), a descending one below min(column).
// It only ever moves a sequence forward (a sequence already past the values
// is left alone), so it is idempotent and safe after the application has
// drawn values. It is the cutover's step StepSequences, run on the new owner
// after the drain (every moved row is there) and before the unfence (no
// application insert into the moved ranges has drawn a value yet): see
// docs/operations.md, "Sequences and identity columns".
//
// Its cost is one max() per owned sequence: an index probe when the column
// is indexed (a primary key or unique constraint is), a scan otherwise —
// inside the write pause, bounded by the cutover's budget.
func AdvanceSequences(ctx context.Context, q tableset.Querier, set tableset.Set) ([]SequenceAdvance, error) {
	var out []SequenceAdvance
	for _, t := range set.Tables {
		type owned struct {
			col, seq string
			inc      int64
		}
		rows, err := q.Query(ctx, ownedSequences, t.Quoted())
		if err != nil {
			return out, fmt.Errorf("list the sequences of %s: %w", t, err)
		}
		seqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (owned, error) {
			var o owned
			return o, r.Scan(&o.col, &o.seq, &o.inc)
		})
		if err != nil {
			return out, fmt.Errorf("list the sequences of %s: %w", t, err)
		}
		for _, s := range seqs {
			agg := "max"
			if s.inc < 0 {
				agg = "min"
			}
			// last_value and is_called give the next value without
			// consuming one (nextval would, and is not rolled back).
			var held *int64
			var last int64
			var called bool
			if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT %s(%s) FROM %s), last_value, is_called FROM %s`,
				agg, pgx.Identifier{s.col}.Sanitize(), t.Quoted(), s.seq)).Scan(&held, &last, &called); err != nil {
				return out, fmt.Errorf("read sequence %s of %s.%s: %w", s.seq, t, s.col, err)
			}
			next := last
			if called {
				next = last + s.inc
			}
			if held == nil || (s.inc > 0 && next > *held) || (s.inc < 0 && next < *held) {
				continue
			}
			var v int64
			if err := q.QueryRow(ctx, `SELECT setval($1::regclass, $2, true)`, s.seq, *held).Scan(&v); err != nil {
				return out, fmt.Errorf("advance sequence %s of %s.%s past %d: %w", s.seq, t, s.col, *held, err)
			}
			out = append(out, SequenceAdvance{Table: t.String(), Column: s.col, Sequence: s.seq, From: next, To: *held})
		}
	}
	return out, nil
}
