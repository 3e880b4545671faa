package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/ring"
)

// RepairReport is what a repair compared and changed on the target.
type RepairReport struct {
	// Verify is the comparison the repair acted on (before its writes).
	Verify *Report `json:"verify"`
	// Chunks were compared; Repaired of them differed and were rewritten.
	Chunks   int `json:"chunks"`
	Repaired int `json:"repaired"`
	// RowsCopied are source rows written to the target (missing or
	// different there); RowsDeleted are target rows removed (extra, or the
	// old version of a different row).
	RowsCopied  int64         `json:"rows_copied"`
	RowsDeleted int64         `json:"rows_deleted"`
	Tables      []TableRepair `json:"tables"`
	Duration    time.Duration `json:"duration_ns"`
}

// TableRepair is one table's share of a repair.
type TableRepair struct {
	Table       string `json:"table"`
	Chunks      int    `json:"chunks"`
	Repaired    int    `json:"repaired"`
	RowsCopied  int64  `json:"rows_copied"`
	RowsDeleted int64  `json:"rows_deleted"`
}

// Repair makes the moving rows of the target equal to the source's, the
// source being the truth: it compares every chunk as Run does (one source
// snapshot and one target snapshot, taken one after the other) and,
// for each chunk that differs, in one target transaction, deletes the
// target's rows of that chunk that differ or that the source lacks and
// copies the source's rows that differ or that the target lacks, as read in
// the source snapshot. A chunk that compares equal is not written. Only rows
// of the moving ranges are touched; a source row whose key the target holds
// outside the moving ranges makes the repair fail (a primary-key collision
// between shards) with that chunk unchanged.
//
// Nothing else may write the target's moving ranges meanwhile: the move's
// stream must be stopped (a Holder is refused). Changes to the source after
// its snapshot are the stream's to apply when it resumes from a position at
// or before the snapshot. RunID is ignored: a repair records no verify run.
func Repair(ctx context.Context, src, dst *pgxpool.Pool, opts Options) (*RepairReport, error) {
	if opts.Holder != nil {
		return nil, errors.New("repair: an applier is running (a Holder was given): stop the move's stream first, a repair must be the only writer of the moving ranges on the target")
	}
	opts.RunID = ""
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	qs := make([]*tableSQL, len(opts.Set.Tables))
	for i, t := range opts.Set.Tables {
		if qs[i], err = newTableSQL(t, opts.Ranges); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	chunks, err := plan(ctx, src, dst, "", qs, opts.Ranges, opts.ChunkRows)
	if err != nil {
		return nil, err
	}
	rep := &Report{Ranges: ring.Normalize(opts.Ranges), Started: started, Tables: make([]TableReport, len(qs))}
	out := &RepairReport{Verify: rep, Tables: make([]TableRepair, len(qs))}
	var todo []chunk
	for i, q := range qs {
		rep.Tables[i] = TableReport{Table: q.t.String(), PK: q.t.PK, Chunks: make([]ChunkReport, len(chunks[i]))}
		out.Tables[i] = TableRepair{Table: q.t.String(), Chunks: len(chunks[i])}
		out.Chunks += len(chunks[i])
		todo = append(todo, chunks[i]...)
	}
	var mu sync.Mutex
	err = compareAll(ctx, src, dst, opts, qs, todo, rep, nil, func(ctx context.Context, s *session, q *tableSQL, c chunk, diffs []Mismatch) error {
		if len(diffs) == 0 {
			return nil
		}
		copied, deleted, err := repairChunk(ctx, s.src, dst, q, diffs)
		if err != nil {
			return fmt.Errorf("repair chunk %d %s of %s: %w", c.index, interval(c.lo, c.hi), q.t, err)
		}
		opts.Logger.Info("repaired chunk", "table", q.t.String(), "chunk", c.index, "differing", len(diffs), "copied", copied, "deleted", deleted)
		mu.Lock()
		defer mu.Unlock()
		t := &out.Tables[c.table]
		t.Repaired++
		t.RowsCopied += copied
		t.RowsDeleted += deleted
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range rep.Tables {
		summarize(&rep.Tables[i], qs[i].ranges)
		for _, c := range rep.Tables[i].Chunks {
			rep.Rows += c.Rows
		}
		out.Repaired += out.Tables[i].Repaired
		out.RowsCopied += out.Tables[i].RowsCopied
		out.RowsDeleted += out.Tables[i].RowsDeleted
	}
	rep.Duration = time.Since(started)
	out.Duration = rep.Duration
	return out, nil
}

// repairChunk rewrites the differing rows of one chunk on the target in one
// transaction: the target's rows with those keys in the moving ranges go,
// the source's rows with those keys (read in the source snapshot) come in.
// It returns the rows copied and deleted.
func repairChunk(ctx context.Context, src *readTx, dst *pgxpool.Pool, q *tableSQL, diffs []Mismatch) (copied, deleted int64, err error) {
	var all, fromSource [][]string
	for _, m := range diffs {
		all = append(all, m.Key)
		if m.Kind != Extra {
			fromSource = append(fromSource, m.Key)
		}
	}
	var rows bytes.Buffer
	if len(fromSource) > 0 {
		if _, err := src.conn.PgConn().CopyTo(ctx, &rows, q.copyOutSQL(fromSource)); err != nil {
			return 0, 0, fmt.Errorf("read the source's rows: %w", err)
		}
	}
	conn, err := dial(ctx, dst, "reshard repair")
	if err != nil {
		return 0, 0, fmt.Errorf("connect to the target: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// The target's moving ranges are fenced: like the applier and the
		// copy, pass the fence triggers.
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		del, args := q.deleteKeys(all)
		tag, err := tx.Exec(ctx, del, args...)
		if err != nil {
			return fmt.Errorf("delete the target's differing rows: %w", err)
		}
		deleted = tag.RowsAffected()
		if len(fromSource) == 0 {
			return nil
		}
		tag, err = tx.Conn().PgConn().CopyFrom(ctx, &rows, q.copyInSQL())
		if err != nil {
			return fmt.Errorf("copy the source's rows: %w", err)
		}
		copied = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return copied, deleted, nil
}

// dial opens a dedicated connection with pgsession's settings pinned (no
// policy may hide a target row from the delete), parallel query and JIT
// off (verifySessionSQL says the same to a transaction verify is handed).
//
// Parallel query off: verify already keeps the cores busy with its own
// workers (Options.Parallel), each reading both sides at once, and a
// chunk's parallel workers are new processes each time, each loading its
// caches and compiling the chunk's expressions anew. With them, verifying a
// fifth of a 1.1 GiB orders table spent 5.3 to 6.5 CPU-seconds, without
// them 3.1 to 3.7 (3 runs each, alternating, at load 10 to 12); the
// comparison reads the same rows either way.
//
// JIT off: a chunk's expressions would be compiled anew for every chunk,
// and a chunk is too short for the compiled code to pay for it. The index
// scan's estimate for a chunk stays below jit_above_cost; a plan whose
// estimate passed it (a bitmap scan of a chunk of a 20 GB table, tried on
// 2026-12-04) spent twice the source's CPU with jit on.
func dial(ctx context.Context, pool *pgxpool.Pool, app string) (*pgx.Conn, error) {
	cfg := pool.Config().ConnConfig.Copy()
	pgsession.PinConfig(&cfg.Config)
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = app
	}
	cfg.RuntimeParams["max_parallel_workers_per_gather"] = "0"
	cfg.RuntimeParams["jit"] = "off"
	return pgx.ConnectConfig(ctx, cfg)
}

// verifySessionSQL sets dial's planner settings for the rest of a
// transaction verify did not open itself (the capacity probe's target).
const verifySessionSQL = "SET LOCAL max_parallel_workers_per_gather = 0; SET LOCAL jit = off"

// writable are the columns a repair copies (not generated).
func (q *tableSQL) writable() string {
	var cols []string
	for _, c := range q.t.WritableColumns() {
		cols = append(cols, pgx.Identifier{c.Name}.Sanitize())
	}
	return strings.Join(cols, ", ")
}

// keyIn renders "the primary key is one of keys" for rows of alias t. COPY
// takes no parameters, so the keys are literals, cast to the key's types.
func (q *tableSQL) keyIn(keys [][]string) string {
	rows := make([]string, len(keys))
	for i, k := range keys {
		vals := make([]string, len(k))
		for j, v := range k {
			vals[j] = "CAST(" + quoteLiteral(v) + " AS " + q.pkTypes[j] + ")"
		}
		rows[i] = "(" + strings.Join(vals, ", ") + ")"
	}
	return "(" + strings.Join(q.pkCols, ", ") + ") IN (VALUES " + strings.Join(rows, ", ") + ")"
}

// copyOutSQL reads the source rows with the given keys in the moving ranges
// as a binary COPY stream of the writable columns.
func (q *tableSQL) copyOutSQL(keys [][]string) string {
	return "COPY (SELECT " + q.writable() + " FROM " + q.from + " WHERE " + q.keyIn(keys) + " AND " + q.pred + ") TO STDOUT (FORMAT binary)"
}

// copyInSQL loads such a stream into the target table.
func (q *tableSQL) copyInSQL() string {
	return "COPY " + q.t.Quoted() + " (" + q.writable() + ") FROM STDIN (FORMAT binary)"
}

// deleteKeys deletes the target rows with the given keys in the moving
// ranges (a row with such a key outside them belongs to the target).
func (q *tableSQL) deleteKeys(keys [][]string) (string, []any) {
	cols := make([]string, len(q.pkCols))
	arrays := make([]string, len(q.pkCols))
	casts := make([]string, len(q.pkCols))
	args := make([]any, len(q.pkCols))
	for j := range q.pkCols {
		cols[j] = fmt.Sprintf("k%d", j+1)
		arrays[j] = fmt.Sprintf("$%d::text[]", j+1)
		casts[j] = "CAST(u." + cols[j] + " AS " + q.pkTypes[j] + ")"
		vals := make([]string, len(keys))
		for i, k := range keys {
			vals[i] = k[j]
		}
		args[j] = vals
	}
	return "DELETE FROM " + q.from + " WHERE (" + strings.Join(q.pkCols, ", ") + ") IN (SELECT " + strings.Join(casts, ", ") +
		" FROM unnest(" + strings.Join(arrays, ", ") + ") AS u(" + strings.Join(cols, ", ") + ")) AND " + q.pred, args
}

// quoteLiteral renders s as an SQL string literal, whatever
// standard_conforming_strings says.
func quoteLiteral(s string) string {
	l := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		l = "E" + strings.ReplaceAll(l, `\`, `\\`)
	}
	return l
}
