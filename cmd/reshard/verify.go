package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// errMismatch is returned after the report when rows differ: exit code 1.
var errMismatch = errors.New("source and target differ")

func newVerifyCmd(opts *globalOptions) *cobra.Command {
	var (
		srcDSN, dstDSN, runID string
		tables, ranges        []string
		asJSON                bool
		chunkRows, parallel   int
		bisectRows, maxKeys   int
		rowsPerSec            float64
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Compare the rows of token ranges on two shards, chunk by chunk, down to the keys that differ",
		Long: `Direct mode: compares the rows of the given token ranges on a source and a
target database by chunked checksums, bisecting a mismatching chunk down to the
primary keys that differ (missing on the target, extra on the target, or
different). Both sides are read in one snapshot each, taken one after the
other, so the source should be quiescent for the ranges compared; during a
move, the move's own verify step holds the applier at the source snapshot's
LSN instead.

With --run-id, progress is recorded on the target (schema reshard) and a
rerun with the same id continues with the chunks not yet verified.

Exit status: 0 equal, 1 rows differ (or the comparison failed), 2 bad input.`,
		Example: `  reshard verify --source-dsn postgres://u@src/app --target-dsn postgres://u@dst/app \
    --table users:id --table orders:user_id --range -9223372036854775808:0`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcDSN, dstDSN := flagOrEnv(srcDSN, "RESHARD_SOURCE_DSN"), flagOrEnv(dstDSN, "RESHARD_TARGET_DSN")
			spec, rs, err := parseVerifyInput(srcDSN, dstDSN, tables, ranges)
			if err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			src, err := verifyConnect(ctx, "source", srcDSN)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := verifyConnect(ctx, "target", dstDSN)
			if err != nil {
				return err
			}
			defer dst.Close()
			set, err := tableset.Introspect(ctx, src, spec, "source")
			if err != nil {
				return err
			}
			if _, err := tableset.Introspect(ctx, dst, spec, "target"); err != nil {
				return err
			}
			rep, err := verify.Run(ctx, src, dst, verify.Options{
				RunID: runID, Set: set, Ranges: rs, ChunkRows: chunkRows, BisectRows: bisectRows,
				Parallel: parallel, RowsPerSecond: rowsPerSec, MaxSampleKeys: maxKeys, Logger: opts.logger,
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				j, err := rep.JSON()
				if err != nil {
					return err
				}
				fmt.Fprintln(out, string(j))
			} else if err := rep.Table(out); err != nil {
				return err
			}
			if rep.Problem != "" {
				return fmt.Errorf("%w: %s", errMismatch, rep.Problem)
			}
			if !rep.OK() {
				return fmt.Errorf("%w: %d rows", errMismatch, rep.Mismatches())
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	// The environment is read when the command runs, not as the flag's
	// default: a default is printed by --help, and a DSN may hold a password.
	f.StringVar(&srcDSN, "source-dsn", "", "source database (default $RESHARD_SOURCE_DSN)")
	f.StringVar(&dstDSN, "target-dsn", "", "target database (default $RESHARD_TARGET_DSN)")
	f.StringArrayVar(&tables, "table", nil, "table and shard-key column, [schema.]table:key (repeatable; all share one key type)")
	f.StringArrayVar(&ranges, "range", nil, "token range lo:hi or (lo,hi] as the CLI prints it, lo exclusive, hi inclusive (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&runID, "run-id", "", "record progress on the target under this id and resume it")
	f.IntVar(&chunkRows, "chunk-rows", workflows.DefaultVerifyChunkRows, "moving rows per verify chunk (the --verify-chunk-rows of a migration)")
	f.IntVar(&bisectRows, "bisect-rows", 1000, "compare row by row below this many rows")
	f.IntVar(&parallel, "parallel", 2, "chunks compared at once (one connection per side each)")
	f.Float64Var(&rowsPerSec, "rows-per-sec", 0, "throttle: rows read per second and side (0: unthrottled)")
	f.IntVar(&maxKeys, "max-keys", 20, "differing keys listed per chunk")
	return cmd
}

// parseVerifyInput checks the flags; every error is bad input.
func parseVerifyInput(srcDSN, dstDSN string, tables, ranges []string) (tableset.Spec, []ring.Range, error) {
	var spec tableset.Spec
	if srcDSN == "" || dstDSN == "" {
		return spec, nil, errors.New("both --source-dsn and --target-dsn are needed (or RESHARD_SOURCE_DSN and RESHARD_TARGET_DSN)")
	}
	if len(tables) == 0 {
		return spec, nil, errors.New("name at least one --table table:key")
	}
	if len(ranges) == 0 {
		return spec, nil, errors.New("name at least one --range lo:hi")
	}
	for _, t := range tables {
		name, key, ok := strings.Cut(t, ":")
		if !ok || name == "" || key == "" {
			return spec, nil, fmt.Errorf("--table %q: want [schema.]table:key", t)
		}
		ts := tableset.TableSpec{Table: name, KeyColumn: key}
		if s, n, ok := strings.Cut(name, "."); ok {
			ts.Schema, ts.Table = s, n
		}
		spec.Tables = append(spec.Tables, ts)
	}
	spec.Name = spec.Tables[0].Table
	var rs []ring.Range
	for _, s := range ranges {
		r, err := ring.ParseRange(s)
		if err != nil {
			return spec, nil, fmt.Errorf("--range: %w", err)
		}
		rs = append(rs, r)
	}
	return spec, rs, nil
}

// verifyConnect opens a pool; messages name the side, never the DSN (it
// may hold a password).
func verifyConnect(ctx context.Context, side, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgsession.ParsePoolConfig(dsn)
	if err != nil {
		return nil, usageError{fmt.Errorf("--%s-dsn is not a valid PostgreSQL connection string", side)}
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = p.Ping(ctx); err != nil {
			p.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the %s: %w", side, err)
	}
	return p, nil
}
