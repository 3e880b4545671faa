package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/reshard/reshard/internal/pgcsv"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/router"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

func newLoadCmd(opts *globalOptions) *cobra.Command {
	var (
		cf              configFlags
		keyspace, table string
		file            string
		batchRows       int
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "load --table <table> --file <csv|-> [--keyspace <k>]",
		Short: "Load rows from a CSV file onto the shards that own them",
		Long: `Reads a CSV file (or - for standard input) whose first line names the columns,
computes each row's token from the table's shard-key column (the keyspace's key
type, the same function as routers use: docs/contract.md) and COPYs every row to
the shard that owns it in the current topology, in batches of --batch-rows rows
per shard. The values are stored as PostgreSQL's own COPY ... (FORMAT csv,
HEADER) of the file would store them: each line is passed on as written ("" is
an empty string, an unquoted empty field NULL, a quoted line break kept); a UTF-8
byte order mark before the header is dropped.

All or nothing: every shard's batches go into one transaction per shard, and
the shards commit only once every row of the file was copied. A bad line or
value anywhere (a key that does not parse, a value a column's type refuses, a
row a constraint refuses) rolls every shard back: nothing is loaded. The open
transactions hold their locks until the end: a cutover or fence change on a
shard being loaded waits for the load to commit (past its write-pause budget
it backs off and tries again), so load between migrations, or in smaller files.

Every shard parses the values alike, under reshard's session settings, whatever
the servers' defaults: dates as ISO or in year-month-day order (DateStyle ISO,
YMD), a timestamptz without an offset in UTC, intervals in PostgreSQL's style,
xml as content, an unquoted NULL in an array as NULL. Write timestamps with
their offset.

Every shard's fence refuses rows it does not own, so a topology change during the
load (a cutover) fails the load instead of misplacing rows; nothing is loaded
and the file can be loaded again. reshard check placement verifies the result.

Exit codes: 0 loaded, 1 failure (a fence, a server down; nothing loaded, unless
a shard failed while the shards committed, which the message names), 2 bad input
(unknown table or column, a generated column, a line or a value that does not
parse; nothing loaded).`,
		Example: `  reshard load --table users --file users.csv
  reshard load --table orders --file - --batch-rows 50000`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if table == "" || file == "" {
				return usageError{errors.New("give --table and --file (a CSV file with a header line, or - for standard input)")}
			}
			if batchRows < 1 {
				return usageError{fmt.Errorf("--batch-rows %d: want 1 or more", batchRows)}
			}
			return withControl(cmd, opts, &cf, 24*time.Hour, func(ctx context.Context, cfg *clusterConfig, store *topology.Store, pool *pgxpool.Pool) error {
				k, err := store.ResolveKeyspace(ctx, keyspace)
				if err != nil {
					return usageError{err}
				}
				var keyCol, qualified string
				for _, t := range k.Tables {
					schema := t.Schema
					if schema == "" {
						schema = "public"
					}
					if table == t.Table || table == schema+"."+t.Table {
						keyCol, qualified = t.KeyColumn, schema+"."+t.Table
					}
				}
				if keyCol == "" {
					var names []string
					for _, t := range k.Tables {
						names = append(names, t.Table)
					}
					return usageError{fmt.Errorf("table %s is not in keyspace %s (its tables: %s); register it with reshard keyspace add-table", table, k.Name, strings.Join(names, ", "))}
				}
				cur, err := store.In(k.Name).Current(ctx)
				if err != nil {
					return controlErr(err)
				}
				in := cmd.InOrStdin()
				if file != "-" {
					f, err := os.Open(file)
					if err != nil {
						return usageError{err}
					}
					defer f.Close()
					in = f
				}
				schema, name, _ := strings.Cut(qualified, ".")
				counts, err := loadCSV(ctx, cfg, cur, k.KeyType, tableset.TableSpec{Schema: schema, Table: name, KeyColumn: keyCol}, in, batchRows)
				if asJSON {
					if jerr := topoWriteJSON(cmd.OutOrStdout(), struct {
						Table   string           `json:"table"`
						Version int64            `json:"topology_version"`
						Rows    map[string]int64 `json:"rows_by_shard"`
						Error   string           `json:"error,omitempty"`
					}{qualified, cur.Version, counts, errText(err)}); jerr != nil {
						return jerr
					}
				} else {
					printLoad(cmd.OutOrStdout(), qualified, cur.Version, counts)
				}
				return err
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&table, "table", "", "registered table to load (schema.table or table)")
	f.StringVar(&keyspace, "keyspace", "", "keyspace of the table (default: the only one)")
	f.StringVar(&file, "file", "", "CSV file with a header line naming the columns; - reads standard input")
	f.IntVar(&batchRows, "batch-rows", 10_000, "rows per COPY and shard")
	f.BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func printLoad(out io.Writer, table string, version int64, counts map[string]int64) {
	names := make([]string, 0, len(counts))
	var total int64
	for n, c := range counts {
		names = append(names, n)
		total += c
	}
	sort.Strings(names)
	fmt.Fprintf(out, "loaded %d rows of %s by topology v%d:\n", total, table, version)
	for _, n := range names {
		fmt.Fprintf(out, "  %s\t%d\n", n, counts[n])
	}
}

// loadCSV routes every record of in to its owner in cur and COPYs it there
// as written, in one transaction per shard; the shards commit only when
// every record was copied. It returns the rows each shard committed.
func loadCSV(ctx context.Context, cfg *clusterConfig, cur topology.Topology, kt ring.KeyType, ts tableset.TableSpec, in io.Reader, batchRows int) (map[string]int64, error) {
	counts := map[string]int64{}
	table := ts.Schema + "." + ts.Table
	r := pgcsv.NewReader(in)
	h, err := r.Header()
	if err != nil {
		return counts, usageError{fmt.Errorf("read the CSV header line: %w", err)}
	}
	pools := map[string]*pgxpool.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	pool := func(shard string) (*pgxpool.Pool, error) {
		if p := pools[shard]; p != nil {
			return p, nil
		}
		dsn, ok := cfg.Shards[shard]
		if !ok {
			return nil, usageError{fmt.Errorf("topology v%d names shard %s, which is not in the configuration %s", cur.Version, shard, cfg.Path)}
		}
		p, err := cfg.connect(ctx, "shard "+shard, dsn)
		if err != nil {
			return nil, err
		}
		pools[shard] = p
		return p, nil
	}
	first, err := pool(cur.Ring.Shards()[0])
	if err != nil {
		return counts, err
	}
	set, err := tableset.Introspect(ctx, first, tableset.Spec{Name: "load", Tables: []tableset.TableSpec{ts}}, "shard "+cur.Ring.Shards()[0])
	var p *tableset.Problem
	if errors.As(err, &p) {
		return counts, usageError{err}
	}
	if err != nil {
		return counts, err
	}
	header, err := loadHeader(set.Tables[0], h)
	if err != nil {
		return counts, usageError{err}
	}
	keyAt := slices.Index(header, ts.KeyColumn)
	cols := make([]string, len(header))
	for i, c := range header {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	copySQL := fmt.Sprintf("COPY %s (%s) FROM STDIN WITH (FORMAT csv)", set.Tables[0].Quoted(), strings.Join(cols, ", "))

	type batch struct {
		tx    pgx.Tx
		buf   bytes.Buffer
		lines []int // the file's line of each record in buf
		rows  int64 // copied in tx
	}
	batches := map[string]*batch{}
	committed := false
	defer func() {
		if committed {
			return
		}
		for _, b := range batches {
			if b.tx != nil {
				_ = b.tx.Rollback(context.WithoutCancel(ctx))
			}
		}
	}()
	flush := func(shard string) error {
		b := batches[shard]
		if len(b.lines) == 0 {
			return nil
		}
		if b.tx == nil {
			p, err := pool(shard)
			if err != nil {
				return err
			}
			if b.tx, err = p.Begin(ctx); err != nil {
				return fmt.Errorf("begin on shard %s: %w", shard, err)
			}
		}
		tag, err := b.tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(b.buf.Bytes()), copySQL)
		if err != nil {
			return loadCopyError(err, shard, table, b.lines)
		}
		b.rows += tag.RowsAffected()
		b.buf.Reset()
		b.lines = b.lines[:0]
		return nil
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return counts, usageError{fmt.Errorf("%w; nothing was loaded", err)}
		}
		if len(rec.Fields) != len(header) {
			return counts, usageError{fmt.Errorf("CSV line %d has %d field(s), the header %d: COPY would refuse it; nothing was loaded", rec.Line, len(rec.Fields), len(header))}
		}
		key := rec.Fields[keyAt]
		if key.Null() {
			return counts, usageError{fmt.Errorf("CSV line %d: the shard key %s is empty, which COPY reads as NULL, and a row with a NULL key belongs to no shard (an empty text key is written \"\"); nothing was loaded", rec.Line, ts.KeyColumn)}
		}
		if kt == ring.KeyText && !utf8.ValidString(key.Value) {
			return counts, usageError{fmt.Errorf("CSV line %d: the shard key %s is not valid UTF-8 (%q); nothing was loaded", rec.Line, ts.KeyColumn, key.Value)}
		}
		tok, err := ring.TokenOf(kt, key.Value)
		if err != nil {
			return counts, usageError{fmt.Errorf("CSV line %d: key %q of %s: %w; nothing was loaded", rec.Line, key.Value, ts.KeyColumn, err)}
		}
		shard := cur.Ring.Owner(tok)
		b := batches[shard]
		if b == nil {
			b = &batch{}
			batches[shard] = b
		}
		b.buf.Write(rec.Raw)
		b.buf.WriteByte('\n')
		b.lines = append(b.lines, rec.Line)
		if len(b.lines) >= batchRows {
			if err := flush(shard); err != nil {
				return counts, err
			}
		}
	}
	shards := slices.Sorted(maps.Keys(batches))
	for _, shard := range shards {
		if err := flush(shard); err != nil {
			return counts, err
		}
	}
	// Every record is copied: commit. A shard failing now leaves the ones
	// before it committed (the message names them).
	committed = true
	for i, shard := range shards {
		b := batches[shard]
		if err := b.tx.Commit(ctx); err != nil {
			for _, rest := range shards[i+1:] {
				_ = batches[rest].tx.Rollback(context.WithoutCancel(ctx))
			}
			if i == 0 {
				return counts, fmt.Errorf("commit on shard %s: %w; nothing was loaded", shard, err)
			}
			return counts, fmt.Errorf("commit on shard %s: %w; the shards before it (%s) committed their rows of %s, the others rolled back: load the rows of %s again", shard, err, strings.Join(shards[:i], ", "), table, strings.Join(shards[i:], ", "))
		}
		counts[shard] = b.rows
	}
	return counts, nil
}

// loadHeader checks the header's names against the table's columns: each a
// writable column, named once, the shard key among them.
func loadHeader(t tableset.Table, h pgcsv.Record) ([]string, error) {
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

// loadCopyError says which line of the file a refused COPY names, and
// whether it is bad input (SQLSTATE classes 22 and 23: a value or a row the
// table refuses) or a failure; every shard is rolled back after it.
func loadCopyError(err error, shard, table string, lines []int) error {
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
	if strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23") { // data, integrity: the file's
		return usageError{fmt.Errorf("%s%s refused by %s on shard %s (%s); nothing was loaded", where, pe.Message, table, shard, pe.Where)}
	}
	return fmt.Errorf("%sCOPY into %s on shard %s: %w; nothing was loaded", where, table, shard, err)
}
