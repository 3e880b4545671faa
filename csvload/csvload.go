// Package csvload loads a CSV file onto the shards that own its rows: each
// record is routed by the token of its shard key in a topology and COPYed,
// as written, to its owner.
//
// Invariant: all or nothing. Every shard's batches go into one transaction
// per shard, and the shards commit only once every record of the file was
// copied; a bad record anywhere rolls every shard back. Bad input (a header
// or a line the table refuses) is a *pgerr.InputError naming the line.
package csvload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/internal/pgcsv"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// badInput is a file or a table the load refuses: nothing was loaded.
var badInput = pgerr.BadInput

// Table is the registered table of keyspace k that name (schema.table or
// table) names, and its qualified name.
func Table(k topology.Keyspace, name string) (tableset.TableSpec, string, error) {
	for _, t := range k.Tables {
		schema := t.Schema
		if schema == "" {
			schema = "public"
		}
		if name == t.Table || name == schema+"."+t.Table {
			return tableset.TableSpec{Schema: schema, Table: t.Table, KeyColumn: t.KeyColumn}, schema + "." + t.Table, nil
		}
	}
	var names []string
	for _, t := range k.Tables {
		names = append(names, t.Table)
	}
	return tableset.TableSpec{}, "", badInput("table %s is not in keyspace %s (its tables: %s); register it with reshard keyspace add-table", name, k.Name, strings.Join(names, ", "))
}

// Options of a Load.
type Options struct {
	// Topology routes each record to the shard owning its token.
	Topology topology.Topology
	KeyType  ring.KeyType
	Table    tableset.TableSpec
	// BatchRows is the rows per COPY and shard.
	BatchRows int
	// Connect opens a shard's pool; Load closes the pools it opened.
	Connect func(ctx context.Context, shard string) (*pgxpool.Pool, error)
}

// loader is one Load: its pools and each shard's open batch.
type loader struct {
	o       Options
	table   string // schema.table
	copySQL string
	pools   map[string]*pgxpool.Pool
	batches map[string]*batch
}

type batch struct {
	tx    pgx.Tx
	buf   bytes.Buffer
	lines []int // the file's line of each record in buf
	rows  int64 // copied in tx
}

// Load routes every record of in to its owner in o.Topology and COPYs it
// there as written, in one transaction per shard; the shards commit only
// when every record was copied. It returns the rows each shard committed.
func Load(ctx context.Context, in io.Reader, o Options) (map[string]int64, error) {
	l := &loader{o: o, table: o.Table.Schema + "." + o.Table.Table, pools: map[string]*pgxpool.Pool{}, batches: map[string]*batch{}}
	defer l.close()
	r := pgcsv.NewReader(in)
	h, err := r.Header()
	if err != nil {
		return map[string]int64{}, badInput("read the CSV header line: %w", err)
	}
	header, err := l.prepare(ctx, h)
	if err != nil {
		return map[string]int64{}, err
	}
	committed := false
	defer func() {
		if !committed {
			l.rollback(ctx, slices.Collect(maps.Keys(l.batches)))
		}
	}()
	if err := l.route(ctx, r, header); err != nil {
		return map[string]int64{}, err
	}
	committed = true
	return l.commit(ctx)
}

func (l *loader) close() {
	for _, p := range l.pools {
		p.Close()
	}
}

func (l *loader) pool(ctx context.Context, shard string) (*pgxpool.Pool, error) {
	if p := l.pools[shard]; p != nil {
		return p, nil
	}
	p, err := l.o.Connect(ctx, shard)
	if err != nil {
		return nil, err
	}
	l.pools[shard] = p
	return p, nil
}

// prepare reads the table's columns on the ring's first shard and checks
// the header against them; it returns the header's column names.
func (l *loader) prepare(ctx context.Context, h pgcsv.Record) ([]string, error) {
	first := l.o.Topology.Ring.Shards()[0]
	p, err := l.pool(ctx, first)
	if err != nil {
		return nil, err
	}
	set, err := tableset.Introspect(ctx, p, tableset.Spec{Name: "load", Tables: []tableset.TableSpec{l.o.Table}}, "shard "+first)
	var prob *tableset.Problem
	if errors.As(err, &prob) {
		return nil, &pgerr.InputError{Err: err}
	}
	if err != nil {
		return nil, err
	}
	header, err := Header(set.Tables[0], h)
	if err != nil {
		return nil, &pgerr.InputError{Err: err}
	}
	cols := make([]string, len(header))
	for i, c := range header {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	l.copySQL = fmt.Sprintf("COPY %s (%s) FROM STDIN WITH (FORMAT csv)", set.Tables[0].Quoted(), strings.Join(cols, ", "))
	return header, nil
}

// route reads every record, appends it to its owner's batch and copies a
// batch once it holds BatchRows records; then copies what is left.
func (l *loader) route(ctx context.Context, r *pgcsv.Reader, header []string) error {
	keyAt := slices.Index(header, l.o.Table.KeyColumn)
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return badInput("%w; nothing was loaded", err)
		}
		if len(rec.Fields) != len(header) {
			return badInput("CSV line %d has %d field(s), the header %d: COPY would refuse it; nothing was loaded", rec.Line, len(rec.Fields), len(header))
		}
		shard, err := l.owner(rec, rec.Fields[keyAt])
		if err != nil {
			return err
		}
		b := l.batches[shard]
		if b == nil {
			b = &batch{}
			l.batches[shard] = b
		}
		b.buf.Write(rec.Raw)
		b.buf.WriteByte('\n')
		b.lines = append(b.lines, rec.Line)
		if len(b.lines) >= l.o.BatchRows {
			if err := l.flush(ctx, shard); err != nil {
				return err
			}
		}
	}
	for _, shard := range slices.Sorted(maps.Keys(l.batches)) {
		if err := l.flush(ctx, shard); err != nil {
			return err
		}
	}
	return nil
}

// owner is the shard owning the record's key.
func (l *loader) owner(rec pgcsv.Record, key pgcsv.Field) (string, error) {
	kc := l.o.Table.KeyColumn
	if key.Null() {
		return "", badInput("CSV line %d: the shard key %s is empty, which COPY reads as NULL, and a row with a NULL key belongs to no shard (an empty text key is written \"\"); nothing was loaded", rec.Line, kc)
	}
	if l.o.KeyType == ring.KeyText && !utf8.ValidString(key.Value) {
		return "", badInput("CSV line %d: the shard key %s is not valid UTF-8 (%q); nothing was loaded", rec.Line, kc, key.Value)
	}
	tok, err := ring.TokenOf(l.o.KeyType, key.Value)
	if err != nil {
		return "", badInput("CSV line %d: key %q of %s: %w; nothing was loaded", rec.Line, key.Value, kc, err)
	}
	return l.o.Topology.Ring.Owner(tok), nil
}

// flush copies a shard's batch in its transaction (begun at its first).
func (l *loader) flush(ctx context.Context, shard string) error {
	b := l.batches[shard]
	if len(b.lines) == 0 {
		return nil
	}
	if b.tx == nil {
		p, err := l.pool(ctx, shard)
		if err != nil {
			return err
		}
		if b.tx, err = p.Begin(ctx); err != nil {
			return fmt.Errorf("begin on shard %s: %w", shard, err)
		}
	}
	tag, err := b.tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(b.buf.Bytes()), l.copySQL)
	if err != nil {
		return copyError(err, shard, l.table, b.lines)
	}
	b.rows += tag.RowsAffected()
	b.buf.Reset()
	b.lines = b.lines[:0]
	return nil
}

func (l *loader) rollback(ctx context.Context, shards []string) {
	for _, s := range shards {
		if b := l.batches[s]; b.tx != nil {
			_ = b.tx.Rollback(context.WithoutCancel(ctx))
		}
	}
}

// commit commits every shard's transaction: every record is copied. A
// shard failing now leaves the ones before it committed (the message names
// them).
func (l *loader) commit(ctx context.Context) (map[string]int64, error) {
	counts := map[string]int64{}
	shards := slices.Sorted(maps.Keys(l.batches))
	for i, shard := range shards {
		b := l.batches[shard]
		if err := b.tx.Commit(ctx); err != nil {
			l.rollback(ctx, shards[i+1:])
			if i == 0 {
				return counts, fmt.Errorf("commit on shard %s: %w; nothing was loaded", shard, err)
			}
			return counts, fmt.Errorf("commit on shard %s: %w; the shards before it (%s) committed their rows of %s, the others rolled back: load the rows of %s again", shard, err, strings.Join(shards[:i], ", "), l.table, strings.Join(shards[i:], ", "))
		}
		counts[shard] = b.rows
	}
	return counts, nil
}

// Header checks the header's names against the table's columns: each a
// writable column, named once, the shard key among them.
func Header(t tableset.Table, h pgcsv.Record) ([]string, error) {
	var names, writable []string
	for _, c := range t.WritableColumns() {
		writable = append(writable, c.Name)
	}
	for _, f := range h.Fields {
		c, ok := t.Column(f.Value)
		switch {
		case !ok:
			return nil, fmt.Errorf("the CSV header names %q, which is not a column of %s (its columns: %s); nothing was loaded", f.Value, t, strings.Join(writable, ", "))
		case c.Generated:
			return nil, fmt.Errorf("the CSV header names %q, a generated column of %s: PostgreSQL computes it, leave it out of the file; nothing was loaded", f.Value, t)
		case slices.Contains(names, f.Value):
			return nil, fmt.Errorf("the CSV header names %q twice; nothing was loaded", f.Value)
		}
		names = append(names, f.Value)
	}
	if !slices.Contains(names, t.KeyColumn) {
		return nil, fmt.Errorf("the CSV header (%s) has no column %s, the shard key of %s; nothing was loaded", strings.Join(names, ","), t.KeyColumn, t)
	}
	return names, nil
}

var copyLine = regexp.MustCompile(`\bline (\d+)\b`)

// copyError says which line of the file a refused COPY names, and whether
// it is bad input (SQLSTATE classes 22 and 23: a value or a row the table
// refuses) or a failure; every shard is rolled back after it.
func copyError(err error, shard, table string, lines []int) error {
	if router.IsFenceError(err) {
		return fmt.Errorf("shard %s refused a row: its ranges moved during the load (a cutover); nothing was loaded, load the file again: %w", shard, err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("COPY into %s on shard %s: %w; nothing was loaded", table, shard, err)
	}
	where := ""
	if m := copyLine.FindStringSubmatch(pe.Where); m != nil {
		if n, _ := strconv.Atoi(m[1]); n >= 1 && n <= len(lines) {
			where = fmt.Sprintf("CSV line %d: ", lines[n-1])
		}
	}
	if c := pgerr.Class(pe.Code); c == pgerr.ClassDataException || c == pgerr.ClassIntegrityViolation { // data, integrity: the file's
		return badInput("%s%s refused by %s on shard %s (%s); nothing was loaded", where, pe.Message, table, shard, pe.Where)
	}
	return fmt.Errorf("%sCOPY into %s on shard %s: %w; nothing was loaded", where, table, shard, err)
}
