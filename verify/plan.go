package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgddl"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
)

// chunk is one key interval (lo, hi] of one table; a nil bound is open, so
// the chunks of a table cover its whole key space whatever rows arrive later.
type chunk struct {
	table  int
	index  int
	lo, hi []string
	done   *chunkRecord // verified by an earlier attempt of the same run
}

// chunkRecord is what the work table keeps of a verified chunk.
type chunkRecord struct {
	rows       int64
	rangeRows  []int64
	lsn        string
	verifiedAt time.Time
}

// samplesPerChunk is how many sampled keys back one chunk boundary: enough
// for chunk sizes within a few tens of percent of the target.
const samplesPerChunk = 64

// planTable splits a table's key space into chunks of about chunkRows moving
// rows each, from a page sample of the source. A table expected to hold
// fewer than 1.5 chunks' worth of moving rows is one chunk.
func planTable(ctx context.Context, src *pgxpool.Pool, q *tableSQL, chunkRows int) ([][]string, error) {
	var est int64
	if err := src.QueryRow(ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass`, q.t.Quoted()).Scan(&est); err != nil {
		return nil, fmt.Errorf("estimate rows of %s: %w", q.t, err)
	}
	if est <= 0 { // never analyzed
		if err := src.QueryRow(ctx, "SELECT count(*) FROM "+q.t.Quoted()).Scan(&est); err != nil {
			return nil, fmt.Errorf("count rows of %s: %w", q.t, err)
		}
	}
	frac := q.fraction()
	expected := float64(est) * frac
	if expected < 1.5*float64(chunkRows) {
		return nil, nil
	}
	n := int(math.Ceil(expected / float64(chunkRows)))
	pct := 100 * float64(n*samplesPerChunk) / expected
	pct = math.Min(100, math.Max(pct, 0.0001))
	rows, err := src.Query(ctx, q.sample(pct))
	if err != nil {
		return nil, fmt.Errorf("sample keys of %s: %w", q.t, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return nil, fmt.Errorf("sample keys of %s: %w", q.t, err)
	}
	n = min(n, len(keys))
	var bounds [][]string
	for i := 1; i < n; i++ {
		bounds = append(bounds, keys[i*len(keys)/n])
	}
	return bounds, nil
}

// chunksOf turns boundaries into chunks.
func chunksOf(table int, bounds [][]string) []chunk {
	out := make([]chunk, 0, len(bounds)+1)
	var lo []string
	for i := 0; i <= len(bounds); i++ {
		var hi []string
		if i < len(bounds) {
			hi = bounds[i]
		}
		out = append(out, chunk{table: table, index: i, lo: lo, hi: hi})
		lo = hi
	}
	return out
}

const workDDL = `CREATE SCHEMA IF NOT EXISTS reshard;
CREATE TABLE IF NOT EXISTS reshard.verify_run (
	run_id     text PRIMARY KEY,
	ranges     text NOT NULL,
	tables     text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS reshard.verify_chunk (
	run_id      text NOT NULL REFERENCES reshard.verify_run ON DELETE CASCADE,
	table_name  text NOT NULL,
	chunk       int NOT NULL,
	lo          text,
	hi          text,
	rows        bigint,
	range_rows  bigint[],
	checksum    text,
	ok          boolean,
	lsn         text,
	verified_at timestamptz,
	PRIMARY KEY (run_id, table_name, chunk)
)`

// plan returns the chunks of every table. With a run id, the plan is kept on
// the target: the first attempt of a run samples and records it, later
// attempts read it back with what was verified, so the chunks, and what
// "next chunk" means, stay the same across restarts.
func plan(ctx context.Context, src, dst *pgxpool.Pool, runID string, qs []*tableSQL, ranges []ring.Range, chunkRows int) ([][]chunk, error) {
	fresh := func() ([][]chunk, error) {
		out := make([][]chunk, len(qs))
		for i, q := range qs {
			b, err := planTable(ctx, src, q, chunkRows)
			if err != nil {
				return nil, err
			}
			out[i] = chunksOf(i, b)
		}
		return out, nil
	}
	if runID == "" {
		return fresh()
	}
	if err := pgddl.Apply(ctx, dst, workDDL, 0); err != nil {
		return nil, fmt.Errorf("create work tables reshard.verify_run, reshard.verify_chunk on target: %w", err)
	}
	rangesJSON, _ := json.Marshal(ring.Normalize(ranges))
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.t.String()
	}
	tablesJSON, _ := json.Marshal(names)

	var gotRanges, gotTables string
	err := dst.QueryRow(ctx, `SELECT ranges, tables FROM reshard.verify_run WHERE run_id = $1`, runID).Scan(&gotRanges, &gotTables)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		chunks, err := fresh()
		if err != nil {
			return nil, err
		}
		if err := savePlan(ctx, dst, runID, string(rangesJSON), string(tablesJSON), qs, chunks); err != nil {
			return nil, err
		}
		return chunks, nil
	case err != nil:
		return nil, fmt.Errorf("read verify run %q on target: %w", runID, err)
	}
	if gotRanges != string(rangesJSON) || gotTables != string(tablesJSON) {
		return nil, fmt.Errorf("verify run %q was started for ranges %s and tables %s, not %s and %s: use a new run id",
			runID, gotRanges, gotTables, rangesJSON, tablesJSON)
	}
	return loadPlan(ctx, dst, runID, qs)
}

func savePlan(ctx context.Context, dst *pgxpool.Pool, runID, ranges, tables string, qs []*tableSQL, chunks [][]chunk) error {
	return pgx.BeginFunc(ctx, dst, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO reshard.verify_run (run_id, ranges, tables) VALUES ($1, $2, $3)`, runID, ranges, tables); err != nil {
			return fmt.Errorf("record verify run %q on target: %w", runID, err)
		}
		var b pgx.Batch
		for i, cs := range chunks {
			for _, c := range cs {
				b.Queue(`INSERT INTO reshard.verify_chunk (run_id, table_name, chunk, lo, hi) VALUES ($1, $2, $3, $4, $5)`,
					runID, qs[i].t.String(), c.index, boundJSON(c.lo), boundJSON(c.hi))
			}
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return fmt.Errorf("record chunks of verify run %q on target: %w", runID, err)
		}
		return nil
	})
}

func loadPlan(ctx context.Context, dst *pgxpool.Pool, runID string, qs []*tableSQL) ([][]chunk, error) {
	idx := map[string]int{}
	for i, q := range qs {
		idx[q.t.String()] = i
	}
	rows, err := dst.Query(ctx, `
		SELECT table_name, chunk, lo, hi, coalesce(ok, false), coalesce(rows, 0), coalesce(range_rows, '{}'), coalesce(lsn, ''), verified_at
		FROM reshard.verify_chunk WHERE run_id = $1 ORDER BY table_name, chunk`, runID)
	if err != nil {
		return nil, fmt.Errorf("read chunks of verify run %q on target: %w", runID, err)
	}
	defer rows.Close()
	out := make([][]chunk, len(qs))
	for rows.Next() {
		var (
			name   string
			c      chunk
			lo, hi *string
			ok     bool
			rec    chunkRecord
			at     *time.Time
		)
		if err := rows.Scan(&name, &c.index, &lo, &hi, &ok, &rec.rows, &rec.rangeRows, &rec.lsn, &at); err != nil {
			return nil, fmt.Errorf("read chunks of verify run %q: %w", runID, err)
		}
		t, found := idx[name]
		if !found {
			return nil, fmt.Errorf("verify run %q records table %s, which is not in the set", runID, name)
		}
		c.table = t
		if c.lo, err = parseBound(lo); err != nil {
			return nil, fmt.Errorf("verify run %q, %s chunk %d: %w", runID, name, c.index, err)
		}
		if c.hi, err = parseBound(hi); err != nil {
			return nil, fmt.Errorf("verify run %q, %s chunk %d: %w", runID, name, c.index, err)
		}
		if ok && at != nil {
			rec.verifiedAt = *at
			c.done = &rec
		}
		out[t] = append(out[t], c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read chunks of verify run %q: %w", runID, err)
	}
	for i, cs := range out {
		if len(cs) == 0 {
			return nil, fmt.Errorf("verify run %q has no chunks for %s: use a new run id", runID, qs[i].t)
		}
	}
	return out, nil
}

// record keeps the outcome of a chunk on the target. Only a chunk whose
// source and target agreed is recorded ok; a mismatching one is checked again
// by the next attempt, which must name its keys in its own report.
func record(ctx context.Context, dst *pgxpool.Pool, runID string, q *tableSQL, c ChunkReport, checksum string) error {
	rangeRows := make([]int64, len(c.Ranges))
	for i, r := range c.Ranges {
		rangeRows[i] = r.SourceRows
	}
	_, err := dst.Exec(ctx, `
		UPDATE reshard.verify_chunk SET rows = $4, range_rows = $5, checksum = $6, ok = $7, lsn = $8, verified_at = now()
		WHERE run_id = $1 AND table_name = $2 AND chunk = $3`,
		runID, q.t.String(), c.Index, c.SourceRows, rangeRows, checksum, c.Mismatches == 0, c.LSN)
	if err != nil {
		return fmt.Errorf("record chunk %d of %s in verify run %q on target: %w", c.Index, q.t, runID, err)
	}
	return nil
}

func boundJSON(b []string) *string {
	if b == nil {
		return nil
	}
	j, _ := json.Marshal(b)
	s := string(j)
	return &s
}

func parseBound(s *string) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	var b []string
	if err := json.Unmarshal([]byte(*s), &b); err != nil || b == nil {
		return nil, fmt.Errorf("bad chunk bound %q", *s)
	}
	return b, nil
}

// DropRuns forgets verify runs on the target where they were recorded (a
// move's cleanup or rollback); their chunk rows go with them (ON DELETE
// CASCADE). A target where verify never recorded a run has nothing to drop.
func DropRuns(ctx context.Context, dst *pgxpool.Pool, runIDs []string) error {
	if len(runIDs) == 0 {
		return nil
	}
	_, err := dst.Exec(ctx, `DELETE FROM reshard.verify_run WHERE run_id = ANY($1)`, runIDs)
	if pgerr.Code(err) == pgerr.CodeUndefinedTable {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drop verify runs %v: %w", runIDs, err)
	}
	return nil
}
