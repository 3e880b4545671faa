package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/csvload"
	"github.com/reshard/reshard/fence"
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
			return withControlDB(cmd, opts, &cf, 24*time.Hour, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				lo, qualified, err := csvload.Prepare(ctx, ctl.Store, keyspace, table, batchRows)
				if err != nil {
					return registerErr(err)
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
				lo.Connect = cfg.topologyShard(lo.Topology.Version)
				counts, err := csvload.Load(ctx, in, lo)
				err = inputErr(err)
				res := csvload.Result{Table: qualified, Version: lo.Topology.Version, Rows: counts}
				if err != nil {
					res.Error = err.Error()
				}
				if perr := res.Print(cmd.OutOrStdout(), asJSON); perr != nil {
					return perr
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
