package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/tableset"
)

// A copy beside its stream (Options.StreamDuringCopy): the copy's half of
// cdc's copy gate (cdc/copygate.go). Every unit is registered before any
// chunk is read, so the stream skips a table's changes only while none of
// its chunks has started; each chunk's end is fixed first and recorded,
// committed, before its snapshot is taken, so a change the stream skips
// (read after the change's transaction became visible) is in a snapshot
// taken later.

// afterGatedRead, set by tests, runs between a chunk's read and its write:
// it widens the window in which the chunk's snapshot is older than the
// changes the stream receives.
var afterGatedRead func()

// register records every unit of the copy, in one transaction, before any
// chunk is read; a unit an earlier run recorded keeps its position.
func (c *copier) register(ctx context.Context, units []unit) error {
	for _, u := range units {
		if _, err := cdc.NewKeyOrder(u.table); err != nil {
			return err
		}
	}
	return pgx.BeginFunc(ctx, c.dst, func(tx pgx.Tx) error {
		for _, u := range units {
			if _, err := tx.Exec(ctx, `INSERT INTO reshard.copy_checkpoint (move, table_name, range_lo, range_hi, order_by)
				VALUES ($1, $2, $3, $4, $5) ON CONFLICT (move, table_name, range_lo, range_hi) DO NOTHING`,
				c.opts.Move, u.table.String(), u.rng.Lo, u.rng.Hi, string(OrderPK)); err != nil {
				return fmt.Errorf("copy %s of %s: register the unit for the stream's gate on the target: %w", u.rng, u.table, err)
			}
		}
		return nil
	})
}

// readGated reads the unit's next chunk of about n rows after pos: it fixes
// the chunk's end (the n-th row's key, or the table's end), records it as
// being read, and only then reads the chunk, up to that end.
func (c *copier) readGated(ctx context.Context, u unit, pos position, n int, buf *bytes.Buffer, nCols, nExtra int) (chunk, error) {
	fail := func(what string, err error) (chunk, error) {
		return chunk{}, fmt.Errorf("copy chunk %s of %s: %s: %w", u.rng, u.table, what, err)
	}
	var end []string
	err := c.src.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, setOwnAppName+pagingSettings); err != nil {
				return err
			}
			err := tx.QueryRow(ctx, chunkEndSQL(u.table, u.parts, pos, n)).Scan(&end)
			if errors.Is(err, pgx.ErrNoRows) {
				end = nil
				return nil
			}
			return err
		})
	})
	if err != nil {
		return fail("fix its end on the source", err)
	}
	tag, err := c.dst.Exec(ctx, markReadingSQL(u.table), c.opts.Move, u.table.String(), u.rng.Lo, u.rng.Hi, end)
	if err != nil {
		return fail("record it as being read on the target", err)
	}
	if tag.RowsAffected() != 1 {
		return fail("record it as being read on the target", errCheckpointMoved)
	}
	buf.Reset()
	stmt := setOwnAppName + pagingSettings + boundedChunkSQL(u.table, u.parts, OrderPK, pos, end, n)
	var added []string
	if err := c.src.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
		if _, err := conn.Conn().PgConn().CopyTo(ctx, buf, stmt); err != nil {
			return err
		}
		// The columns the source has now that the copy does not read. The
		// gate skips a change to a key not yet copied because this read
		// will carry it: a column added before the read (an ADD COLUMN
		// raises no error in it, as a dropped one does) would lose the
		// change's value in it. Read after the chunk, this sees every
		// ALTER that committed before the chunk's snapshot.
		return conn.QueryRow(ctx, `SELECT coalesce(array_agg(attname::text ORDER BY attnum), '{}') FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attname::text <> ALL($2::text[])`,
			u.table.Quoted(), columnNames(u.table)).Scan(&added)
	}); err != nil {
		return fail("read from source", err)
	}
	if len(added) > 0 {
		return chunk{}, &SchemaMovedError{Err: fmt.Errorf("copy chunk %s of %s: the source has column(s) %s, added since the copy read the table's columns",
			u.rng, u.table, strings.Join(added, ", "))}
	}
	data, err := splitChunk(buf.Bytes(), nCols, nExtra) // rows in a slice of their own
	if err != nil {
		return fail("split", err)
	}
	if afterGatedRead != nil {
		afterGatedRead()
	}
	ch := chunk{chunkData: data, from: pos, pos: pos, final: end == nil}
	switch {
	case end != nil:
		ch.pos = position{pk: end}
	case data.rows > 0:
		ch.pos = position{pk: make([]string, len(u.table.PK))}
		for i, v := range data.extras {
			ch.pos.pk[i] = string(v)
		}
	}
	ch.extras = nil // they point into buf
	return ch, nil
}

// StreamAfterCopyReason is why the copy of set cannot run beside its
// stream, in a few words naming the first such table ("table public.x
// has a text primary key"); "" when every table's can. PLAN's checks
// give it when the default (MigrationRequest.StreamAuto) streams after
// the copy.
func StreamAfterCopyReason(set tableset.Set) string {
	for _, t := range set.Tables {
		if _, err := cdc.NewKeyOrder(t); err == nil {
			continue
		}
		if len(t.PK) == 0 {
			return fmt.Sprintf("table %s has no primary key", t)
		}
		for _, name := range t.PK {
			c, _ := t.Column(name)
			switch strings.TrimSpace(c.Type) {
			case "smallint", "integer", "bigint", "uuid":
				continue
			}
			if len(t.PK) == 1 {
				return fmt.Sprintf("table %s has a %s primary key", t, c.Type)
			}
			return fmt.Sprintf("table %s has a %s column (%s) in its primary key", t, c.Type, name)
		}
		return fmt.Sprintf("table %s has a primary key the copy gate cannot order", t)
	}
	return ""
}

// StreamDuringCopyProblems are PLAN's refusals of --stream-during-copy for
// set, read on shard: a table whose copy cannot run beside its stream (the
// copy gate orders only integer and uuid primary keys as the server does),
// each named with the fix.
func StreamDuringCopyProblems(set tableset.Set, shard string) []*tableset.Problem {
	var out []*tableset.Problem
	for _, t := range set.Tables {
		if _, err := cdc.NewKeyOrder(t); err != nil {
			out = append(out, &tableset.Problem{Check: "stream-during-copy", Shard: shard, Table: t.String(), Problem: err.Error(),
				Fix: "start the migration with --stream-during-copy=false, or without the flag (each move's stream then starts after its copy)"})
		}
	}
	return out
}

// columnNames are t's columns' names.
func columnNames(t tableset.Table) []string {
	names := make([]string, len(t.Columns))
	for i, col := range t.Columns {
		names[i] = col.Name
	}
	return names
}
