package cdc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The staged path of a flush: the flush's rows go by one binary COPY into a
// temporary table of the transaction (every column text, so the COPY needs
// no type knowledge and no escaping), and one statement per kind applies
// them from there. It replaces the text[] parameters of the array path once a
// flush holds StageMinRows rows: encoding and parsing arrays cost more, per
// row, than the COPY, and an UPDATE of rows the source updated (kind 'U')
// skips the tuple lock (and its WAL record) that INSERT ... ON CONFLICT DO
// UPDATE takes before updating.
//
// A stage is created by the transaction's first staged flush of its table
// and dropped at its commit (ON COMMIT DROP), never kept for the session:
// PostgreSQL keeps the position of pg_replication_origin_xact_setup in the
// session after a rollback, and the transaction the server runs at a
// session's end to drop its temporary tables commits with it, into the
// origin. A batch whose COMMIT failed, or whose session was killed between
// the xact_setup and the COMMIT, would then have its position recorded
// without its changes, and the next stream would resume past it
// (TestFailedBatchLeavesOriginAtLastCommit; TestCrashResume lost changes
// so when the stages lived as long as the session). The applier's session
// therefore holds no temporary object between transactions, and nothing
// commits in it but batches.
//
// Stage rows: k is 'D' (delete the key), 'U' (full row of a source UPDATE
// whose key stayed: the target row is expected to exist) or 'I' (full row
// to upsert); v0..vn are the plan's columns as pgoutput's text, NULL where
// not sent (the non-key columns of a delete).

// Stage row kinds.
const (
	stageDelete byte = 'D'
	stageUpdate byte = 'U'
	stageUpsert byte = 'I'
)

// stageSQL is one table's statements of the staged path.
type stageSQL struct {
	name     string // pg_temp.reshard_stage_N
	create   string
	copy     string // COPY into the stage
	truncate string
	clear    string // DELETE of every stage row
	delete   string // the target rows of the stage's 'D' keys
	update   string // the stage's 'U' rows, by UPDATE
	upsert   string // the stage's 'I' rows, by INSERT ... ON CONFLICT DO UPDATE
	// fallback upserts the 'U' rows that the UPDATE did not find (their
	// target row was missing); it skips every key the target holds, so the
	// rows the UPDATE wrote are not written twice, and a key held outside
	// the ranges is written by neither (a collision, found by collision).
	fallback  string
	collision string // a key of the stage's full rows held outside the ranges
}

func (p *tablePlan) buildStageSQL(n int) {
	st := &p.stage
	st.name = "pg_temp." + pgx.Identifier{"reshard_stage_" + strconv.Itoa(n)}.Sanitize()
	tq := p.t.Quoted() + " AS t"
	var defs, names, sel, set []string
	for i, c := range p.cols {
		q := pgx.Identifier{c.Name}.Sanitize()
		v := "s.v" + strconv.Itoa(i)
		defs = append(defs, "v"+strconv.Itoa(i)+" text")
		names = append(names, q)
		sel = append(sel, cast(v, c))
		if !slices.Contains(p.pk, i) {
			set = append(set, q+" = "+cast(v, c))
		}
	}
	var pkNames, join, join2, pkText []string
	for _, i := range p.pk {
		c := p.cols[i]
		q := pgx.Identifier{c.Name}.Sanitize()
		pkNames = append(pkNames, q)
		join = append(join, "t."+q+" = "+cast("s.v"+strconv.Itoa(i), c))
		join2 = append(join2, "t2."+q+" = "+cast("s.v"+strconv.Itoa(i), c))
		pkText = append(pkText, "t."+q+"::text")
	}
	excluded := make([]string, 0, len(p.cols))
	for i, c := range p.cols {
		if !slices.Contains(p.pk, i) {
			q := pgx.Identifier{c.Name}.Sanitize()
			excluded = append(excluded, q+" = EXCLUDED."+q)
		}
	}
	if len(excluded) == 0 { // every column is in the key: a no-op update still reports the row
		excluded = append(excluded, pkNames[0]+" = EXCLUDED."+pkNames[0])
	}
	p.updatable = len(set) > 0
	st.create = "CREATE TEMP TABLE " + st.name + " (k \"char\" NOT NULL, " + strings.Join(defs, ", ") + ") ON COMMIT DROP"
	st.copy = "COPY " + st.name + " FROM STDIN (FORMAT binary)"
	st.truncate = "TRUNCATE " + st.name
	st.clear = "DELETE FROM " + st.name
	st.delete = "DELETE FROM " + tq + " USING " + st.name + " AS s WHERE s.k = 'D' AND " + strings.Join(join, " AND ") + " AND " + p.pred
	if p.updatable {
		st.update = "UPDATE " + tq + " SET " + strings.Join(set, ", ") + " FROM " + st.name + " AS s WHERE s.k = 'U' AND " +
			strings.Join(join, " AND ") + " AND " + p.pred
	}
	insert := "INSERT INTO " + tq + " (" + strings.Join(names, ", ") + ") OVERRIDING SYSTEM VALUE SELECT " + strings.Join(sel, ", ") +
		" FROM " + st.name + " AS s WHERE "
	conflict := " ON CONFLICT (" + strings.Join(pkNames, ", ") + ") DO UPDATE SET " + strings.Join(excluded, ", ") + " WHERE " + p.pred
	st.upsert = insert + "s.k = 'I'" + conflict
	st.fallback = insert + "s.k = 'U' AND NOT EXISTS (SELECT 1 FROM " + p.t.Quoted() + " AS t2 WHERE " + strings.Join(join2, " AND ") + ")" + conflict
	st.collision = "SELECT " + strings.Join(pkText, ", ") + " FROM " + tq + " JOIN " + st.name + " AS s ON " + strings.Join(join, " AND ") +
		" WHERE s.k <> 'D' AND (" + p.pred + ") IS NOT TRUE LIMIT 1"
}

// copyBuf encodes stage rows in COPY's binary format.
type copyBuf struct{ b bytes.Buffer }

var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

func (w *copyBuf) reset() {
	w.b.Reset()
	w.b.Write(copyHeader)
}

// row starts a stage row of kind; its ncols columns follow.
func (w *copyBuf) row(kind byte, ncols int) {
	b := w.b.AvailableBuffer()
	b = binary.BigEndian.AppendUint16(b, uint16(ncols+1))
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, kind)
	w.b.Write(b)
}

// col appends one column of the row (null: NULL).
func (w *copyBuf) col(data []byte, null bool) {
	if null {
		w.b.Write([]byte{0xff, 0xff, 0xff, 0xff})
		return
	}
	w.b.Write(binary.BigEndian.AppendUint32(w.b.AvailableBuffer(), uint32(len(data))))
	w.b.Write(data)
}

func (w *copyBuf) finish() []byte {
	w.b.Write([]byte{0xff, 0xff})
	return w.b.Bytes()
}

// flushStaged writes a table's pending operations into its stage by binary
// COPY, then sends the statements that apply them, in pipeline mode (see
// flushTable).
func (tg *target) flushStaged(ctx context.Context, p *tablePlan, pt *pendingTable) error {
	w := &tg.copyBuf
	w.reset()
	nDel, nUpd, nIns := 0, 0, 0
	for _, k := range pt.order {
		op := pt.ops[k]
		if !op.upsert {
			w.row(stageDelete, len(p.cols))
			for i := range p.cols {
				if j := slices.Index(p.pk, i); j >= 0 {
					w.col([]byte(op.pk[j]), false)
				} else {
					w.col(nil, true)
				}
			}
			nDel++
			continue
		}
		if op.update && p.updatable {
			w.row(stageUpdate, len(p.cols))
			nUpd++
		} else {
			w.row(stageUpsert, len(p.cols))
			nIns++
		}
		for _, c := range op.row {
			w.col(c.Data, c.Kind != ColText)
		}
	}
	tg.npend -= len(pt.order)
	pt.order = pt.order[:0]
	clear(pt.ops)
	if err := tg.await(ctx); err != nil {
		return err
	}
	// Rows of an earlier flush of this transaction go first. A DELETE is
	// cheap (a TRUNCATE in a transaction cost 0.9 ms here, a DELETE of a
	// small stage 0.04 ms) but leaves dead rows that every later scan of the
	// stage reads until the commit: past stageTruncateRows of them, TRUNCATE.
	sql := p.stage.copy
	switch n, ok := tg.staged[p]; {
	case !ok: // the transaction's first staged flush of the table
		sql = p.stage.create + "; " + sql
	case n >= stageTruncateRows:
		sql = p.stage.truncate + "; " + sql
		tg.staged[p] = 0
	case n > 0:
		sql = p.stage.clear + "; " + sql
	}
	tg.staged[p] += nDel + nUpd + nIns
	if _, err := tg.conn.PgConn().CopyFrom(ctx, bytes.NewReader(w.finish()), sql); err != nil {
		return wrapOp(fmt.Sprintf("stage %d rows of %s on the target", nDel+nUpd+nIns, p.t), err)
	}
	pl := tg.conn.PgConn().StartPipeline(ctx)
	f := &inflight{pl: pl, plan: p, staged: true}
	// Deletes first: a key that left the ranges frees its unique values
	// before another row takes them.
	if nDel > 0 {
		pl.SendQueryParams(p.stage.delete, nil, nil, nil, nil)
		f.nDel = nDel
	}
	if nUpd > 0 {
		pl.SendQueryParams(p.stage.update, nil, nil, nil, nil)
		f.nUpd = nUpd
	}
	if nIns > 0 {
		pl.SendQueryParams(p.stage.upsert, nil, nil, nil, nil)
		f.nUp = nIns
	}
	if err := pl.Sync(); err != nil {
		_ = pl.Close()
		return wrapOp(fmt.Sprintf("send %d deletes, %d updates and %d upserts to %s", nDel, nUpd, nIns, p.t), err)
	}
	tg.inflight = f
	tg.written += nDel + nUpd + nIns
	return nil
}

// stagedMissing runs after a staged flush's UPDATE found fewer rows than it
// was given: the others are upserted (their target row was missing), and if
// some key is still unwritten, the target holds it outside the ranges.
func (tg *target) stagedMissing(ctx context.Context, p *tablePlan, missing int) error {
	res := tg.conn.PgConn().ExecParams(ctx, p.stage.fallback, nil, nil, nil, nil).Read()
	if res.Err != nil {
		return wrapOp(fmt.Sprintf("upsert %d updated rows missing on the target into %s", missing, p.t), res.Err)
	}
	if int(res.CommandTag.RowsAffected()) == missing {
		return nil
	}
	return tg.stagedCollision(ctx, p)
}

// stagedCollision names a key of the stage's full rows that the target holds
// outside the moving ranges.
func (tg *target) stagedCollision(ctx context.Context, p *tablePlan) error {
	res := tg.conn.PgConn().ExecParams(ctx, p.stage.collision, nil, nil, nil, nil).Read()
	return collisionFrom(p, res)
}

func collisionFrom(p *tablePlan, res *pgconn.Result) error {
	if res.Err != nil {
		return wrapOp("find colliding key in "+p.t.String(), res.Err)
	}
	if len(res.Rows) == 0 {
		return fmt.Errorf("apply upserts to %s: fewer rows written than sent, but no colliding row found", p.t)
	}
	strs := make([]string, len(res.Rows[0]))
	for i, v := range res.Rows[0] {
		strs[i] = string(v)
	}
	return &CollisionError{Table: p.t.String(), Key: p.describeKey(strs)}
}

// stageTruncateRows: once a stage has held this many rows in one
// transaction, it is emptied by TRUNCATE rather than DELETE.
const stageTruncateRows = 20000

// DefaultStageMinRows is StageMinRows' default: below it the staged path's
// extra round trip (the COPY, synchronous), its statements and, once per
// transaction, the creation of the stage cost more than the text[] arrays
// they save. Measured by cmd/reshard-bench, section cdc-stage (apply CPU per
// change, staged ÷ text[], 2 cores at load 3-11, three runs, stages created
// per transaction): 1.73-2.20 at 16 rows per flush, 1.04-1.07 at 256,
// 0.83-0.98 at 1,000, 0.87-1.02 at 2,000; section cdc, a catch-up of 200k
// changes in 10,000-row flushes: 13.0 against 21.9 µs per change. (With
// stages kept for the session it was 0.88-1.19 at 256, hence 256 before.)
const DefaultStageMinRows = 1000
