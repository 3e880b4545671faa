package cdc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Partial updates: a source UPDATE that left unchanged TOAST columns out
// (ColUnchanged) and kept its key, with no earlier image of the key pending
// in the batch to take them from. It stays pending like any other
// operation (a later image of the key replaces it, or takes the columns it
// sent), and a flush writes the partial updates of a table with one UPDATE
// per set of columns sent. Written one by one, each a round trip before the
// next change could be read, 200k updates of 2,000 keys that left a TOASTed
// column unchanged were applied at 4.2-6.5k changes/s, and at 116-172k
// batched (cmd/reshard-bench, section cdc-toast).

// sentMask names the columns a partial row sent: one byte per column.
func sentMask(row []Col) string {
	b := make([]byte, len(row))
	for i, c := range row {
		b[i] = '1'
		if c.Kind == ColUnchanged {
			b[i] = '0'
		}
	}
	return string(b)
}

// partialsSQL sets the sent columns (mask) of the rows whose primary keys
// are in the first arrays, where they are ours; it returns the ordinal of
// each key it found. Parameters: one text[] per key column, then one per
// column sent.
func (p *tablePlan) partialsSQL(mask string) string {
	var arrs, us, set, where []string
	for j, i := range p.pk {
		c := p.cols[i]
		u := "k" + strconv.Itoa(j)
		arrs = append(arrs, "$"+strconv.Itoa(len(arrs)+1)+"::text[]")
		us = append(us, u)
		where = append(where, "t."+pgx.Identifier{c.Name}.Sanitize()+" = "+cast("u."+u, c))
	}
	for i, c := range p.cols {
		if mask[i] == '0' {
			continue
		}
		u := "v" + strconv.Itoa(i)
		arrs = append(arrs, "$"+strconv.Itoa(len(arrs)+1)+"::text[]")
		us = append(us, u)
		set = append(set, pgx.Identifier{c.Name}.Sanitize()+" = "+cast("u."+u, c))
	}
	return "UPDATE " + p.t.Quoted() + " AS t SET " + strings.Join(set, ", ") +
		" FROM unnest(" + strings.Join(arrs, ", ") + ") WITH ORDINALITY AS u(" + strings.Join(us, ", ") + ", n)" +
		" WHERE " + strings.Join(where, " AND ") + " AND " + p.pred + " RETURNING u.n"
}

// flushPartials writes the table's pending partial updates before the rest
// of its flush, after its deletes (as a flush sends them: a key that left
// the ranges frees its unique values before another row takes them). A key
// the UPDATE did not find (it just entered the ranges, or the copy has not
// reached it) is read from the source and joins the flush as a whole-row
// upsert, which also finds a row of the key held outside the ranges (a
// collision); a key gone from the source is dropped: a later change in the
// stream deletes or moves it. Synchronous: what the UPDATE found decides
// what the flush sends.
func (tg *target) flushPartials(ctx context.Context, p *tablePlan, pt *pendingTable) error {
	groups := map[string][]string{} // keys, by the columns sent
	var masks []string
	for _, k := range pt.order {
		if op := pt.ops[k]; op.partial {
			m := sentMask(op.row)
			if groups[m] == nil {
				masks = append(masks, m)
			}
			groups[m] = append(groups[m], k)
		}
	}
	if len(masks) == 0 {
		return nil
	}
	if err := tg.await(ctx); err != nil {
		return err
	}
	if err := tg.begin(ctx); err != nil {
		return err
	}
	if err := tg.deleteNow(ctx, p, pt); err != nil {
		return err
	}
	for _, m := range masks {
		keys := groups[m]
		found, err := tg.updatePartials(ctx, p, m, pt, keys)
		if err != nil {
			return err
		}
		for i, k := range keys {
			op := pt.ops[k]
			if found[i] {
				delete(pt.ops, k)
				continue
			}
			cur, ok, err := tg.fetch(ctx, p, op.pk)
			if err != nil {
				return err
			}
			if !ok {
				delete(pt.ops, k)
				continue
			}
			pt.ops[k] = &pendingOp{pk: op.pk, row: fillUnchanged(op.row, cur), upsert: true, fetched: true}
		}
	}
	n := len(pt.order)
	pt.order = slices.DeleteFunc(pt.order, func(k string) bool { return pt.ops[k] == nil })
	tg.npend -= n - len(pt.order)
	return nil
}

// deleteNow runs the table's pending deletes.
func (tg *target) deleteNow(ctx context.Context, p *tablePlan, pt *pendingTable) error {
	arrs := make([]textArray, len(p.pk))
	n := 0
	for _, k := range pt.order {
		if op := pt.ops[k]; op.row == nil {
			for j := range p.pk {
				arrs[j].add([]byte(op.pk[j]), false)
			}
			delete(pt.ops, k)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	tg.mFlushes[0].Inc() // text[] parameters
	vals, oids := textArrayParams(arrs)
	if res := tg.conn.PgConn().ExecParams(ctx, p.deleteSQL, vals, oids, nil, nil).Read(); res.Err != nil {
		return wrapOp(fmt.Sprintf("apply %d deletes to %s", n, p.t), res.Err)
	}
	tg.written += n
	return nil
}

// updatePartials runs one partial UPDATE over keys (all sending the columns
// of mask) and reports which it found.
func (tg *target) updatePartials(ctx context.Context, p *tablePlan, mask string, pt *pendingTable, keys []string) ([]bool, error) {
	arrs := make([]textArray, len(p.pk)+strings.Count(mask, "1"))
	for _, k := range keys {
		op := pt.ops[k]
		for j := range p.pk {
			arrs[j].add([]byte(op.pk[j]), false)
		}
		a := len(p.pk)
		for _, c := range op.row {
			if c.Kind == ColUnchanged {
				continue
			}
			arrs[a].add(c.Data, c.Kind != ColText)
			a++
		}
	}
	tg.mFlushes[0].Inc() // text[] parameters
	vals, oids := textArrayParams(arrs)
	res := tg.conn.PgConn().ExecParams(ctx, p.partialsSQL(mask), vals, oids, nil, nil).Read()
	if res.Err != nil {
		return nil, wrapOp(fmt.Sprintf("apply %d updates of %s (unchanged TOAST columns kept)", len(keys), p.t), res.Err)
	}
	found := make([]bool, len(keys))
	for _, r := range res.Rows {
		n, err := strconv.Atoi(string(r[0]))
		if err != nil || n < 1 || n > len(keys) {
			return nil, fmt.Errorf("apply updates of %s: the target returned ordinal %q of %d keys", p.t, r[0], len(keys))
		}
		found[n-1] = true
	}
	tg.written += len(res.Rows)
	return found, nil
}
