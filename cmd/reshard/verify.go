package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

func newVerifyCmd(opts *globalOptions) *cobra.Command {
	var (
		srcDSN, dstDSN, runID string
		tables, ranges        []string
		asJSON                bool
		chunkRows, parallel   int
		bisectRows, maxKeys   int
		rowsPerSec            float64
		repair                string
		cf                    configFlags
		timeout               time.Duration
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

Repair mode (--repair <migration-or-move>): makes the target of a move equal
to its source in the move's ranges, the source being the truth. It compares
every chunk as verify does and, for each chunk that differs, in one target
transaction, deletes the target's rows that differ or that the source lacks and
copies the source's rows; a chunk that compares equal is not written. Shards,
tables and ranges come from the migration (reshard.yaml and its workflow).
It refuses, changing nothing, unless the move is stopped for the operator
(reshard status shows "stopped") in SNAPSHOT_COPY, CDC_CATCH_UP or VERIFY, or
waits for the verdict on a failed verify in VERIFY, and no stream reads the
move's slot on the source: then nothing else writes the target's moving ranges
and no cutover can start; and it refuses while the topology gives the move's
ranges to its target (a cutover published). Before it writes it drops the
move's reverse slot on the target, if an aborted cutover attempt made one: the
repair's rows carry no replication origin, and GRACE's reverse stream from that
slot would send them back to the source over newer rows; the next cutover
attempt makes the slot again. Do not resume, reverify or approve while it runs.
Afterwards reshard reverify <id> (after a failed verify) or reshard resume <id>
(a stopped move) goes on.

Exit status: 0 equal (repaired), 1 rows differ (or the comparison failed), 2 bad
input, 3 refused (the move may not be repaired now; the reason is printed).`,
		Example: `  reshard verify --source-dsn postgres://u@src/app --target-dsn postgres://u@dst/app \
    --table users:id --table orders:user_id --range -9223372036854775808:0

  # after a failed verify of migration add-shard3 (or name one move: add_shard3_m2)
  reshard verify --repair add-shard3 && reshard reverify add-shard3`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if repair != "" {
				f := cmd.Flags()
				for _, name := range []string{"source-dsn", "target-dsn", "table", "range", "run-id"} {
					if f.Changed(name) {
						return usageError{errRepairArgs}
					}
				}
				return runRepair(cmd, opts, &cf, repair, timeout, asJSON, repairOptions{
					chunkRows: chunkRowsIfSet(f.Changed("chunk-rows"), chunkRows), parallel: parallel, bisectRows: bisectRows,
					rowsPerSec: rowsPerSec, logger: opts.logger,
				})
			}
			return runVerify(cmd, opts, srcDSN, dstDSN, tables, ranges, asJSON, verify.Options{
				RunID: runID, ChunkRows: chunkRows, BisectRows: bisectRows,
				Parallel: parallel, RowsPerSecond: rowsPerSec, MaxSampleKeys: maxKeys, Logger: opts.logger,
			})
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
	f.StringVar(&repair, "repair", "", "repair the target of a stopped move (or of every stopped move of a migration): see above")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "with --repair: how long to wait for a worker to answer the state query")
	cf.register(cmd)
	return cmd
}

// runVerify is verify's direct mode: the flags checked, both sides
// connected, verify.Direct run, the report printed (vo holds the knobs);
// rows that differ are an error after the report (exit code 1).
func runVerify(cmd *cobra.Command, opts *globalOptions, srcDSN, dstDSN string, tables, ranges []string, asJSON bool, vo verify.Options) error {
	srcDSN, dstDSN = flagOrEnv(srcDSN, "RESHARD_SOURCE_DSN"), flagOrEnv(dstDSN, "RESHARD_TARGET_DSN")
	spec, rs, err := verify.ParseDirect(srcDSN, dstDSN, tables, ranges)
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
	vo.Ranges = rs
	rep, err := verify.Direct(ctx, src, dst, spec, vo)
	if err != nil {
		return err
	}
	if err := rep.Print(cmd.OutOrStdout(), asJSON); err != nil {
		return err
	}
	return rep.Verdict()
}

// chunkRowsIfSet: a repair uses the migration's verify chunk size unless
// --chunk-rows was given.
func chunkRowsIfSet(set bool, n int) int {
	if set {
		return n
	}
	return 0
}

// runRepair is verify --repair: the move's state from its workflow, the
// rule checked, the repair run, the figures printed.
func runRepair(cmd *cobra.Command, opts *globalOptions, cf *configFlags, arg string, timeout time.Duration, asJSON bool, o repairOptions) error {
	cfg, err := cf.load(opts)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	migration, move, err := repairTarget(ctx, cfg, arg)
	if err != nil {
		return err
	}
	tc, err := cfg.dialTemporal(ctx, opts)
	if err != nil {
		return err
	}
	defer tc.Close()
	st, err := queryState(ctx, tc, workflows.MigrationWorkflowID(migration), timeout)
	if err != nil {
		return err
	}
	rs, err := repairMoves(ctx, cfg, st, move, o)
	out := cmd.OutOrStdout()
	if len(rs) > 0 {
		if asJSON {
			if jerr := topoWriteJSON(out, rs); jerr != nil {
				return jerr
			}
		} else if perr := verify.PrintRepairs(out, rs); perr != nil {
			return perr
		}
	}
	return err
}
