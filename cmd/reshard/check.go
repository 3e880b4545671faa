package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/topocheck"
	"github.com/reshard/reshard/topoview"
)

func newTopologyCheckCmd(opts *globalOptions, keyspace *string) *cobra.Command {
	var (
		cf     configFlags
		repair bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "check [--repair]",
		Short: "Compare every shard's fences, guards and rows with what the topology wants",
		Long: `For every keyspace and every shard of it (the ring's shards, the ends of migrating
ranges, and registered shards that have the tables), compares the fences and
TRUNCATE guards installed on each registered table with what the current
topology wants (DESIGN.md §3: fenced exactly where the shard owns nothing,
plus the ranges a cutover in progress holds on its source; guarded while a
live move uses the shard), and counts rows the shard holds in ranges it does
not own (outside the ranges of its own moves that have not ended: a move's
two shards both hold its rows until its cleanup, reshard.moves), and rows with a
NULL shard key, which no shard owns (not placed).

It also reports every migration whose workflow has ended (terminated, reset,
failed, its history lost) with moves not ended, and the slots, publications
and replication origins on the configured shards that no live move uses (a
move of a migration whose workflow has ended, or of no stored plan), with the
command that removes them: reshard recover <id>. It asks Temporal only when
there is something to ask about; when Temporal cannot say, it notes it and
reports nothing of that migration.

A shard whose fences differ while a cutover (or a rollback's reverse cutover)
of one of its moves is midway — its journal (reshard.cutover_journal) shows a
step begun and not ended, read before and after the shards, or a step taken
between the two reads — is reported "in transition", not drift: its fences
change as the cutover goes. It does not fail the check and --repair leaves it
alone; check again once the cutover ends.

--repair reconciles the fences and guards of every drifting shard (the same
reconciler cutover, cleanup and rollback use); misplaced rows are reported,
never deleted. Exit codes: 0 no drift (or all repaired; shards in transition
count as no drift), no misplaced rows, no ended migration with work left and
nothing left behind; 1 otherwise; 2 bad input.`,
		Example: `  reshard topology check
  reshard topology check --repair --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withControlDB(cmd, opts, &cf, 10*time.Minute, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				live := &control.Lives{Store: ctl.Store, Dial: func(ctx context.Context) (client.Client, error) { return cfg.dialTemporal(ctx, opts) }}
				defer live.Close()
				report, err := topocheck.Cluster(ctx, topocheck.ClusterOptions{Control: ctl, Keyspace: *keyspace, Shards: cfg.ShardNames(),
					OpenShards: cfg.openShardPools, Live: live.Ask, Repair: repair})
				if !asJSON {
					for _, r := range report {
						topoview.PrintCheck(cmd.OutOrStdout(), r)
					}
				}
				if err != nil {
					return checkErr(err)
				}
				if asJSON {
					if err := topoWriteJSON(cmd.OutOrStdout(), report); err != nil {
						return err
					}
				}
				return topocheck.Problems(report)
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().BoolVar(&repair, "repair", false, "reconcile the fences and guards of drifting shards")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// checkErr maps topocheck's errors: a refused input is a usage error, a
// failed read of the control database is explained (controlErr).
func checkErr(err error) error {
	var ce *topocheck.ControlError
	if errors.As(err, &ce) {
		return controlErr(ce.Err)
	}
	return inputErr(err)
}
