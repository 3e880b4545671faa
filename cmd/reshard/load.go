package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// loadBatch is one shard's pending rows, as CSV.
type loadBatch struct {
	buf  bytes.Buffer
	w    *csv.Writer
	rows int
}

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
per shard. Each batch is one COPY: it is loaded whole or not at all.

Every shard parses the values alike, under reshard's session settings, whatever
the servers' defaults: dates as ISO or in year-month-day order (DateStyle ISO,
YMD), a timestamptz without an offset in UTC, intervals in PostgreSQL's style,
xml as content, an unquoted NULL in an array as NULL. Write timestamps with
their offset.

Every shard's fence refuses rows it does not own, so a topology change during the
load (a cutover) fails the batch it hits instead of misplacing it: the command
stops, says how many rows each shard took, and the rest can be loaded again
(skip the rows already loaded, or load into an empty table and let the primary
key refuse duplicates). reshard check placement verifies the result.

Exit codes: 0 loaded, 1 failure (a batch refused, a server down), 2 bad input
(unknown table or column, a line or a key that does not parse): a file is checked
whole before any row is loaded; from standard input the batches before the bad
line are loaded.`,
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
					// A file is read twice: bad input (a column, a line, a
					// key) is found before any row is loaded.
					if _, err := loadCSV(ctx, cfg, cur, k.KeyType, qualified, keyCol, f, batchRows, true); err != nil {
						return err
					}
					if _, err := f.Seek(0, io.SeekStart); err != nil {
						return err
					}
					in = f
				}
				counts, err := loadCSV(ctx, cfg, cur, k.KeyType, qualified, keyCol, in, batchRows, false)
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

// loadCSV routes every row of in to its owner in cur and COPYs it there in
// batches. It returns the rows each shard committed. check only reads and
// checks every line, loading nothing.
func loadCSV(ctx context.Context, cfg *clusterConfig, cur topology.Topology, kt ring.KeyType, table, keyCol string, in io.Reader, batchRows int, check bool) (map[string]int64, error) {
	counts := map[string]int64{}
	r := csv.NewReader(in)
	r.ReuseRecord = false
	header, err := r.Read()
	if err != nil {
		return counts, usageError{fmt.Errorf("read the CSV header line: %w", err)}
	}
	keyAt := slices.Index(header, keyCol)
	if keyAt < 0 {
		return counts, usageError{fmt.Errorf("the CSV header (%s) has no column %s, the shard key of %s", strings.Join(header, ","), keyCol, table)}
	}
	cols := make([]string, len(header))
	for i, h := range header {
		cols[i] = pgx.Identifier{h}.Sanitize()
	}
	parts := strings.SplitN(table, ".", 2)
	ident := pgx.Identifier{table}
	if len(parts) == 2 {
		ident = pgx.Identifier{parts[0], parts[1]}
	}
	copySQL := fmt.Sprintf("COPY %s (%s) FROM STDIN WITH (FORMAT csv)", ident.Sanitize(), strings.Join(cols, ", "))

	pools := map[string]*pgxpool.Pool{}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	batches := map[string]*loadBatch{}
	flush := func(shard string) error {
		b := batches[shard]
		if b == nil || b.rows == 0 || check {
			if b != nil {
				b.buf.Reset()
				b.rows = 0
			}
			return nil
		}
		b.w.Flush()
		p := pools[shard]
		if p == nil {
			dsn, ok := cfg.Shards[shard]
			if !ok {
				return usageError{fmt.Errorf("topology v%d names shard %s, which is not in the configuration %s", cur.Version, shard, cfg.Path)}
			}
			var err error
			if p, err = cfg.connect(ctx, "shard "+shard, dsn); err != nil {
				return err
			}
			pools[shard] = p
		}
		conn, err := p.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("connect to shard %s: %w", shard, err)
		}
		tag, err := conn.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(b.buf.Bytes()), copySQL)
		conn.Release()
		if err != nil {
			if topology.IsFenceError(err) {
				return fmt.Errorf("shard %s refused a batch of %d rows: its ranges moved during the load (a cutover); load the rest again: %w", shard, b.rows, err)
			}
			return fmt.Errorf("COPY %d rows into %s on shard %s: %w", b.rows, table, shard, err)
		}
		counts[shard] += tag.RowsAffected()
		b.buf.Reset()
		b.rows = 0
		return nil
	}
	line := 1
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line++
		if err != nil {
			return counts, usageError{fmt.Errorf("CSV line %d: %w", line, err)}
		}
		tok, err := ring.TokenOf(kt, rec[keyAt])
		if err != nil {
			return counts, usageError{fmt.Errorf("CSV line %d: key %q of %s: %w", line, rec[keyAt], keyCol, err)}
		}
		shard := cur.Ring.Owner(tok)
		b := batches[shard]
		if b == nil {
			b = &loadBatch{}
			b.w = csv.NewWriter(&b.buf)
			batches[shard] = b
		}
		if err := b.w.Write(rec); err != nil {
			return counts, err
		}
		if b.rows++; b.rows >= batchRows {
			if err := flush(shard); err != nil {
				return counts, err
			}
		}
	}
	for shard := range batches {
		if err := flush(shard); err != nil {
			return counts, err
		}
	}
	return counts, nil
}
