package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/topocheck"
	"github.com/reshard/reshard/topoview"
)

func newCheckCmd(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Checks of the data against the topology: placement",
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(newCheckPlacementCmd(opts))
	return cmd
}

func newCheckPlacementCmd(opts *globalOptions) *cobra.Command {
	var (
		cf       configFlags
		keyspace string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "placement",
		Short: "Count the rows each shard holds in token ranges it does not own",
		Long: `For every keyspace (or --keyspace) and every shard of it, counts per registered
table the rows whose token lies in a range the shard does not own in the current
topology, with up to five sample keys. Rows of a move that has not ended are not
misplaced: its source and target both hold them until its cleanup deleted them
from the old owner (or its rollback from the target), even after its ranges were
published stable (reshard.moves in the control database, docs/contract.md).
Rows whose shard key is NULL have no token and no owner: they are reported as
not placed. It reads only; nothing is deleted. The fences are checked by
reshard topology check.

Exit codes: 0 every row on its owner, 1 misplaced or unplaced rows, 2 bad input.`,
		Example: `  reshard check placement
  reshard check placement --keyspace accts --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withControlDB(cmd, opts, &cf, 30*time.Minute, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				report, misplaced, err := topocheck.Placements(ctx, ctl, keyspace, cfg.openShardPools)
				if !asJSON {
					for _, r := range report {
						topoview.PrintPlacement(cmd.OutOrStdout(), r)
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
				if misplaced > 0 {
					return fmt.Errorf("%d row(s) on shards that do not own them (or with a NULL key, owned by none)", misplaced)
				}
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().StringVar(&keyspace, "keyspace", "", "only this keyspace (default: every keyspace)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
