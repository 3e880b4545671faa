package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/activities"
	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/planview"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/workflows"
)

func newPlanCmd(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan (add-node|split|remove-node|move|rebalance) ...",
		Short: "Dry run of a migration: moves, moved fraction, preflight, estimates, ETA, cutover steps",
		Long: `Computes the moves of a migration from the current topology with the ring
planners and runs the preflight checks of every (source, target) pair: tables,
primary keys, shard-key column, schemas, wal_level, replication privilege,
free slots, TRUNCATE. Prints the moves, the moved fraction against hash-mod-N
and the ideal, rows and bytes to copy, the ETA at the given throttle, index
advice, warnings and the cutover steps. Nothing is started or changed.

Exit codes: 0 the plan is clean, 1 failure (a server could not be asked),
2 bad input or preflight problems (each printed with its fix).`,
		Example: `  reshard plan add-node shard5 --table users:id --table orders:user_id --rows-per-sec 20000
  reshard plan split shard1 --into shard5 --table users:id --json
  reshard plan rebalance --add shard5,shard6,shard7,shard8`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	for _, k := range []workflows.Kind{workflows.KindAddNode, workflows.KindSplit, workflows.KindRemoveNode, workflows.KindMove, workflows.KindRebalance} {
		cmd.AddCommand(newMigrationCmd(opts, k, true))
	}
	return cmd
}

// planReport is reshard plan's report (planview.Report).
type planReport = planview.Report

// runPlan runs the preflight of every pair and prints the plan.
func runPlan(ctx context.Context, cmd *cobra.Command, args []string, cfg *clusterConfig, p *migrationPlan, asJSON bool, walWindow time.Duration) error {
	rep, err := preflightPlan(ctx, cfg, p, walWindow)
	if err != nil {
		return err
	}
	rep.NextSteps = planview.NextSteps(startCommand(cmd, args), rep.Problems)
	out := cmd.OutOrStdout()
	if asJSON {
		if err := topoWriteJSON(out, rep); err != nil {
			return err
		}
	} else {
		planview.Write(out, rep)
		statusview.PrintNextSteps(out, rep.NextSteps)
	}
	if rep.Problems > 0 {
		return usageError{fmt.Errorf("%d preflight problem(s): fix these, nothing was changed", rep.Problems)}
	}
	return nil
}

// preflightPlan runs the PLAN checks of the plan (plan.Checks, as the
// worker's PLAN does: preflight, the capacity probe, the cutover dry run);
// it changes nothing on the servers. A request that leaves
// --stream-during-copy to the default (StreamAuto) has it resolved here:
// p.Request then says on or off, and why off. Problems (capacity refusals among them) are in the
// report, not the error.
func preflightPlan(ctx context.Context, cfg *clusterConfig, p *migrationPlan, walWindow time.Duration) (planReport, error) {
	pools := newLazyShards(cfg, func(name string) error {
		return usageError{fmt.Errorf("shard %s of topology v%d is not in the configuration %s: add its DSN under shards", name, p.From.Version, cfg.Path)}
	})
	defer pools.close()
	o := activities.PlanChecks(p.Request, walWindow, cfg.Capacity)
	o.StreamAuto = p.Request.StreamAuto && p.Request.StreamDuringCopy
	chk, err := plan.Checks(ctx, pools.open, p.Plan, o)
	if err != nil {
		return planReport{}, err
	}
	if o.StreamAuto { // resolved here, once: the workflow reads the value
		p.Request.StreamDuringCopy, p.Request.StreamAfterCopy = chk.StreamDuringCopy, chk.StreamAfterCopy
	}
	return planview.NewReport(p, chk), nil
}
