package verify

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
)

// A re-check (Options.Recheck): the run's plan and its verified chunks
// stand, but rows changed since they were compared. The chunks that the
// changes since then touched are compared again, at a consistent point that
// needs no replication slot, so that a long transaction on the source (the
// one that aborted a cutover) does not hold it up: a temporary slot's
// snapshot waits for every transaction holding an xid (DESIGN.md §4.5).

// Witness is what a stream that applies the source's changes can vouch for;
// the cdc stream satisfies it (cdc/witness.go).
type Witness interface {
	// Pin keeps the record of received transactions whole until unpinned.
	Pin() (unpin func())
	// InDoubt: of the transactions the stream applied (committed before
	// below), those snap does not see; and the running ones of snap the
	// stream cannot vouch for (an earlier runner may have applied them if
	// they committed).
	InDoubt(snap string, below pglogrepl.LSN) (doubt []uint32, unknown []uint64, err error)
	// Touched lists, per table (schema.table), the primary keys of the
	// moving rows changed by source transactions committed at or after
	// since; complete=false when the stream's record does not reach back
	// that far.
	Touched(since pglogrepl.LSN) (keys map[string][]cdc.TouchedKey, complete bool)
}

var _ Witness = (*cdc.Stream)(nil)

// maxPlainAttempts bounds the source snapshots tried for a consistent
// point without a slot; each attempt that finds transactions in doubt waits
// a little longer for them to become visible.
const maxPlainAttempts = 20

// plainSnapshots takes the source and target snapshots of a re-check at one
// position of the source's history without a replication slot:
//
//  1. a plain REPEATABLE READ snapshot S of the source, and in the same
//     statement L, the WAL insert position: every transaction S sees
//     committed before L;
//  2. the applier held at L (every source transaction committed before L
//     applied on the target, none after);
//  3. the stream's witness: the target then holds exactly what S sees,
//     unless the stream applied a transaction S does not see yet (it was
//     committing while S was taken) or one an earlier runner applied may be
//     such a transaction. Then the attempt is given up and another S taken
//     a moment later, when those are visible;
//  4. the target's snapshot, and the applier released.
//
// Nothing here waits for a transaction to end: a transaction still running
// at the check commits after L, so neither side holds it.
func plainSnapshots(ctx context.Context, src, dst *pgxpool.Pool, holder Holder, w Witness, n int) (*snapshots, error) {
	pause := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		s, why, err := plainAttempt(ctx, src, dst, holder, w, n)
		if err != nil || why == "" {
			return s, err
		}
		if attempt == maxPlainAttempts {
			return nil, fmt.Errorf("no consistent point without a slot in %d attempts: %s", attempt, why)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// plainAttempt is one try of plainSnapshots; why says why it gave up.
func plainAttempt(ctx context.Context, src, dst *pgxpool.Pool, holder Holder, w Witness, n int) (_ *snapshots, why string, err error) {
	unpin := w.Pin()
	defer unpin()
	s := &snapshots{sessions: make([]*session, n)}
	for i := range s.sessions {
		s.sessions[i] = &session{}
	}
	defer func() {
		if err != nil || why != "" {
			s.close()
		}
	}()
	first, err := begin(ctx, src, "")
	if err != nil {
		return nil, "", fmt.Errorf("source: %w", err)
	}
	s.sessions[0].src = first
	var snap, name, lsnText string
	// One statement: its snapshot is the transaction's, and the insert
	// position is read after it was taken.
	if err := first.tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text, pg_export_snapshot()`).Scan(&snap, &lsnText, &name); err != nil {
		return nil, "", fmt.Errorf("source: snapshot and WAL position: %w", err)
	}
	lsn, err := pglogrepl.ParseLSN(lsnText)
	if err != nil {
		return nil, "", fmt.Errorf("source: WAL position %q: %w", lsnText, err)
	}
	rest, err := importN(ctx, src, name, n-1)
	if err != nil {
		return nil, "", fmt.Errorf("source: %w", err)
	}
	for i, r := range rest {
		s.sessions[i+1].src = r
	}
	if err := holder.HoldAt(ctx, lsn-1); err != nil {
		if errors.Is(err, cdc.ErrHoldPassed) {
			holder.Release()
			return nil, fmt.Sprintf("the applier was past %s", lsn), nil
		}
		return nil, "", fmt.Errorf("hold the applier at %s: %w", lsn, err)
	}
	released := false
	release := func() {
		if !released {
			holder.Release()
			released = true
		}
	}
	defer release()
	doubt, unknown, err := w.InDoubt(snap, lsn)
	if err != nil {
		return nil, "", err
	}
	if len(doubt) > 0 {
		return nil, fmt.Sprintf("%d source transactions applied before %s were not yet visible to the snapshot (xid %d)", len(doubt), lsn, doubt[0]), nil
	}
	if len(unknown) > 0 {
		ids := make([]string, len(unknown))
		for i, x := range unknown {
			ids[i] = strconv.FormatUint(x, 10)
		}
		var committed []string
		if err := src.QueryRow(ctx, `SELECT coalesce(array_agg(x), '{}') FROM unnest($1::text[]) AS x WHERE pg_xact_status(x::xid8) = 'committed'`, ids).Scan(&committed); err != nil {
			return nil, "", fmt.Errorf("source: status of transactions %s: %w", strings.Join(ids, ","), err)
		}
		if len(committed) > 0 {
			return nil, fmt.Sprintf("transactions %s, running since before the stream started, committed around the snapshot", strings.Join(committed, ",")), nil
		}
	}
	dfirst, dsnap, err := export(ctx, dst)
	release()
	if err != nil {
		return nil, "", fmt.Errorf("target: %w", err)
	}
	s.sessions[0].dst = dfirst
	drest, err := importN(ctx, dst, dsnap, n-1)
	if err != nil {
		return nil, "", fmt.Errorf("target: %w", err)
	}
	for i, r := range drest {
		s.sessions[i+1].dst = r
	}
	s.lsn = lsn.String()
	return s, "", nil
}

// recheckChunks takes a re-check's snapshots and says which verified chunks
// to compare again: those holding a key that changed at or after the chunk's
// own LSN, or all of them when the stream cannot say what changed since the
// oldest was compared.
func recheckChunks(ctx context.Context, src, dst *pgxpool.Pool, opts Options, qs []*tableSQL, chunks [][]chunk) (*snapshots, map[[2]int]bool, error) {
	w, ok := opts.Holder.(Witness)
	if !ok || opts.Holder == nil {
		return nil, nil, errors.New("verify: a re-check needs the move's stream as its holder (it vouches for what it applied)")
	}
	var since pglogrepl.LSN
	first := true
	for _, cs := range chunks {
		for _, c := range cs {
			if c.done == nil {
				continue
			}
			l, err := pglogrepl.ParseLSN(c.done.lsn)
			if err != nil {
				l = 0 // compared without a holder: any change may be after it
			}
			if first || l < since {
				since, first = l, false
			}
		}
	}
	snaps, err := plainSnapshots(ctx, src, dst, opts.Holder, w, opts.Parallel)
	if err != nil {
		return nil, nil, fmt.Errorf("verify: take snapshots: %w", err)
	}
	redo := map[[2]int]bool{}
	// Asked after the hold: every change committed before the snapshots'
	// LSN is in (and some after it, which only adds chunks).
	keys, complete := w.Touched(since)
	for i, q := range qs {
		var verified []chunk
		for _, c := range chunks[i] {
			if c.done != nil {
				verified = append(verified, c)
			}
		}
		if len(verified) == 0 {
			continue
		}
		if !complete {
			for _, c := range verified {
				redo[[2]int{i, c.index}] = true
			}
			continue
		}
		touched := keys[q.t.String()]
		pks := make([][]string, len(touched))
		for j, k := range touched {
			pks[j] = k.PK
		}
		idx, err := chunksHolding(ctx, src, q, chunks[i], pks)
		if err != nil {
			snaps.close()
			return nil, nil, err
		}
		for j, c := range idx {
			ch := chunks[i][c]
			if ch.done == nil {
				continue
			}
			if l, err := pglogrepl.ParseLSN(ch.done.lsn); err != nil || touched[j].Commit >= l {
				redo[[2]int{i, c}] = true
			}
		}
	}
	opts.Logger.Info("verify re-check", "since", since.String(), "complete", complete, "chunks", len(redo), "lsn", snaps.lsn)
	return snaps, redo, nil
}

// chunksHolding returns, for each of keys (primary keys as text), the index
// of the chunk (lo, hi] of q that holds it. The chunk of a key is the number
// of chunk bounds below it, compared as the key's types with the columns'
// collations, as the chunks' own predicates compare them.
func chunksHolding(ctx context.Context, src *pgxpool.Pool, q *tableSQL, chunks []chunk, keys [][]string) ([]int, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if len(chunks) == 1 {
		return make([]int, len(keys)), nil
	}
	ncol := len(q.pkTypes)
	colls := make([]string, ncol)
	for i, c := range q.t.PK {
		if err := src.QueryRow(ctx, `SELECT coalesce((SELECT ' COLLATE ' || a.attcollation::regcollation::text FROM pg_attribute a
			WHERE a.attrelid = $1::regclass AND a.attname = $2 AND a.attcollation <> 0), '')`, q.t.Quoted(), c).Scan(&colls[i]); err != nil {
			return nil, fmt.Errorf("collation of %s.%s: %w", q.t, c, err)
		}
	}
	bounds := make([][]string, ncol)
	for _, c := range chunks[:len(chunks)-1] {
		if len(c.hi) != ncol {
			return nil, fmt.Errorf("chunk %d of %s has a bound of %d columns, want %d", c.index, q.t, len(c.hi), ncol)
		}
		for j, v := range c.hi {
			bounds[j] = append(bounds[j], v)
		}
	}
	vals := make([][]string, ncol)
	for _, k := range keys {
		if len(k) != ncol {
			return nil, fmt.Errorf("a changed key of %s has %d columns, want %d", q.t, len(k), ncol)
		}
		for j, v := range k {
			vals[j] = append(vals[j], v)
		}
	}
	var bcols, kcols, bexpr, kexpr, bargs, kargs []string
	var args []any
	for j := range ncol {
		c := "c" + strconv.Itoa(j)
		bcols, kcols = append(bcols, c), append(kcols, c)
		bexpr = append(bexpr, "CAST(b."+c+" AS "+q.pkTypes[j]+")"+colls[j])
		kexpr = append(kexpr, "CAST(k."+c+" AS "+q.pkTypes[j]+")"+colls[j])
		args = append(args, bounds[j])
		bargs = append(bargs, "$"+strconv.Itoa(len(args))+"::text[]")
	}
	for j := range ncol {
		args = append(args, vals[j])
		kargs = append(kargs, "$"+strconv.Itoa(len(args))+"::text[]")
	}
	sql := "SELECT (SELECT count(*) FROM unnest(" + strings.Join(bargs, ", ") + ") AS b(" + strings.Join(bcols, ", ") + ") WHERE ROW(" +
		strings.Join(bexpr, ", ") + ") < ROW(" + strings.Join(kexpr, ", ") + "))::int FROM unnest(" + strings.Join(kargs, ", ") + ") WITH ORDINALITY AS k(" +
		strings.Join(kcols, ", ") + ", n) ORDER BY k.n"
	rows, err := src.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("chunks of the changed keys of %s: %w", q.t, err)
	}
	idx, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("chunks of the changed keys of %s: %w", q.t, err)
	}
	if len(idx) != len(keys) {
		return nil, fmt.Errorf("chunks of the changed keys of %s: %d answers for %d keys", q.t, len(idx), len(keys))
	}
	return idx, nil
}
