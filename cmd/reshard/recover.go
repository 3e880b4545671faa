package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/topoview"
)

func newRecoverCmd(opts *globalOptions) *cobra.Command {
	var (
		cf            configFlags
		rowsPerSec    float64
		batchRows     int
		skipTemporal  bool
		asJSON        bool
		temporalCheck = 30 * time.Second
	)
	cmd := &cobra.Command{
		Use:   "recover <id>",
		Short: "Bring the cluster back to a clean state after a migration whose workflow ended with work left",
		Long: `Bring the cluster back to a clean state after a migration whose workflow ended
without finishing: terminated or reset in the Temporal UI, failed after its
retries, or with its history lost (workflow not found). Such a migration leaves
ranges migrating (every new migration is refused), slots retaining WAL on the
sources, copies on the targets and TRUNCATE guards on; reshard topology check
reports it.

recover works from the control database alone (the stored plan and the
topology): for each move of the plan that has not ended, a move whose cutover
is published is completed (the ranges stay on the new owner, the old owner's
copy is deleted), any other is rolled back (the ranges stay with, or go back
to, their owner before the migration; the copy on the target is deleted); both
streams' slots, publications and replication origins are dropped, the
cutover's fence holds released, the fences and guards reconciled with the
topology. Then the migration's end is published (no range migrating).

It refuses, changing nothing, while a workflow of the migration runs (roll a
running migration back with reshard rollback, or cancel it in the Temporal UI:
a cancel rolls back by itself). Idempotent: after a crash or an error, run it
again; on a migration with nothing left it changes nothing.

Exit codes: 0 done (or nothing to do), 1 failure (run it again once the cause
is fixed), 2 bad input (unknown migration), 3 refused: a workflow of the
migration still runs.`,
		Example: `  reshard recover add-shard5
  reshard recover add-shard5 --rows-per-sec 20000 --json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := migrationIDArg(args[0])
			if !idPattern.MatchString(id) {
				return usageError{fmt.Errorf("migration id %q: want lower-case letters, digits and '-' (reshard list shows them)", id)}
			}
			if rowsPerSec < 0 || batchRows < 0 {
				return usageError{errors.New("--rows-per-sec and --batch-rows: want 0 or more (0: unlimited, the default batch)")}
			}
			return withControlDB(cmd, opts, &cf, 24*time.Hour, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				tgt, err := rollback.FindTarget(ctx, ctl.Store, ctl.Pool, id, func(plan topology.Plan) error {
					if skipTemporal {
						return nil
					}
					return noWorkflowRuns(ctx, cfg, opts, id, plan, temporalCheck)
				})
				if errors.Is(err, topology.ErrNoPlan) {
					return usageError{fmt.Errorf("no migration %s in the control database (no plan stored); reshard list shows the migrations", id)}
				}
				if err != nil {
					return controlErr(err)
				}
				shards := newLazyShards(cfg, func(name string) error {
					return usageError{fmt.Errorf("shard %s is not in the configuration %s: add it there (the migration's plan names it)", name, cfg.Path)}
				})
				defer shards.close()
				rec, err := rollback.Recover(ctx, id, rollback.RecoverOptions{Store: ctl.Store, Control: ctl.Pool, Shards: shards.open,
					Tables: tgt.Tables, RowsPerSec: rowsPerSec, BatchRows: batchRows, Logger: opts.logger})
				if err != nil {
					if errors.Is(err, rollback.ErrRecoverRunning) {
						return rejectedError{err.Error()}
					}
					return fmt.Errorf("%w; nothing is lost: run reshard recover %s again once the cause is fixed", err, id)
				}
				if asJSON {
					return topoWriteJSON(cmd.OutOrStdout(), rec)
				}
				topoview.Recovery(cmd.OutOrStdout(), rec)
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().Float64Var(&rowsPerSec, "rows-per-sec", 0, "throttle of the deletions of copies, rows per second (0: unlimited)")
	cmd.Flags().IntVar(&batchRows, "batch-rows", 0, "rows per deletion transaction (0: 5000)")
	cmd.Flags().BoolVar(&skipTemporal, "skip-temporal-check", false,
		"do not ask Temporal whether a workflow of the migration runs: only when Temporal and its histories are gone for good and no worker runs")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was done as JSON")
	return cmd
}

// noWorkflowRuns asks Temporal about the migration's workflow and its
// moves' (the plan's move ids): nil when none runs (ended, or not found:
// the history is lost), a rejectedError naming the one that runs, an error
// when Temporal cannot tell.
func noWorkflowRuns(ctx context.Context, cfg *clusterConfig, opts *globalOptions, id string, plan topology.Plan, timeout time.Duration) error {
	tc, err := cfg.dialTemporal(ctx, opts)
	if err != nil {
		return fmt.Errorf("%w; recover asks Temporal that no workflow of migration %s runs first, and changed nothing (if Temporal and its histories are gone for good, --skip-temporal-check)", err, id)
	}
	defer tc.Close()
	var moves []string
	for _, m := range plan.PlannedMoves() {
		moves = append(moves, m.ID)
	}
	l, err := control.MigrationRuns(ctx, tc, id, moves, timeout)
	if err != nil {
		return fmt.Errorf("%w; recover changed nothing (if Temporal and its histories are gone for good, --skip-temporal-check)", err)
	}
	if l.Running != "" {
		return rejectedError{fmt.Sprintf("workflow %s of migration %s is running: roll it back with reshard rollback %s (or cancel it in the Temporal UI: a cancel rolls back); recover is for a migration whose workflow has ended", l.Running, id, id)}
	}
	return nil
}
