package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
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

// placementReport is what check placement found in one keyspace.
type placementReport struct {
	Keyspace string `json:"keyspace"`
	Version  int64  `json:"version"`
	// RunningMoves: moves not ended yet, whose two shards may both hold
	// their rows (not counted as misplaced).
	RunningMoves int                `json:"running_moves"`
	Shards       []placementOfShard `json:"shards"`
}

type placementOfShard struct {
	Shard   string        `json:"shard"`
	Skipped string        `json:"skipped,omitempty"`
	Strays  []fence.Stray `json:"misplaced,omitempty"`
	// Unplaced: rows with a NULL shard key, which no shard owns.
	Unplaced []tableset.NullKeyRows `json:"unplaced,omitempty"`
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
				all, err := checkedKeyspaces(ctx, ctl, keyspace)
				if err != nil {
					return err
				}
				var report []placementReport
				misplaced := int64(0)
				for _, k := range all {
					ks := ctl.Store.In(k.Name)
					checks, err := checkShards(ctx, cfg, fence.Control{Pool: ctl.Pool, Store: ks}, k, false)
					if err != nil {
						return err
					}
					cur, err := ks.Current(ctx)
					if err != nil {
						return controlErr(err)
					}
					running, err := ks.RunningMoves(ctx)
					if err != nil {
						return controlErr(err)
					}
					r := placementReport{Keyspace: k.Name, Version: cur.Version, RunningMoves: len(running)}
					for _, c := range checks {
						r.Shards = append(r.Shards, placementOfShard{Shard: c.Shard, Skipped: c.Skipped, Strays: c.Strays, Unplaced: c.Unplaced})
						for _, s := range c.Strays {
							misplaced += s.Rows
						}
						for _, u := range c.Unplaced {
							misplaced += u.Rows
						}
					}
					report = append(report, r)
					if !asJSON {
						printPlacement(cmd.OutOrStdout(), k, r)
					}
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

func printPlacement(out io.Writer, k topology.Keyspace, r placementReport) {
	fmt.Fprintf(out, "keyspace %s (topology v%d), %d table(s)", k.Name, r.Version, len(k.Tables))
	if r.RunningMoves > 0 {
		fmt.Fprintf(out, "; %d move(s) not ended: their rows may be on both of their shards", r.RunningMoves)
	}
	fmt.Fprintln(out)
	for _, s := range r.Shards {
		switch {
		case s.Skipped != "":
			fmt.Fprintf(out, "%-10s skipped: %s\n", s.Shard, s.Skipped)
		case len(s.Strays) == 0 && len(s.Unplaced) == 0:
			fmt.Fprintf(out, "%-10s ok: every row on its owner\n", s.Shard)
		}
		for _, st := range s.Strays {
			fmt.Fprintf(out, "%-10s misplaced: %d row(s) of %s (keys %s)\n", s.Shard, st.Rows, st.Table, strings.Join(st.Samples, ", "))
		}
		printUnplaced(out, s.Shard, s.Unplaced)
	}
}
