package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topocheck"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/topoview"
)

// keyspaceCheck is what topology check found in one keyspace.
type keyspaceCheck struct {
	Keyspace string            `json:"keyspace"`
	Shards   []topocheck.Shard `json:"shards"`
	// Ended: migrations whose workflow ended with moves not ended.
	Ended []endedMigration `json:"ended_migrations,omitempty"`
	// Leftovers: slots, publications and origins no live move uses.
	Leftovers []leftover `json:"leftovers,omitempty"`
	Notes     []string   `json:"notes,omitempty"`
}

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
				store := ctl.Store
				all, err := checkedKeyspaces(ctx, ctl, *keyspace)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				live := &liveness{cfg: cfg, opts: opts, store: store}
				defer live.close()
				left, leftNotes, err := leftovers(ctx, cfg, store, live)
				if err != nil {
					return err
				}
				bad, badMigrations, badObjects := 0, 0, 0
				var report []keyspaceCheck
				for i, k := range all {
					ks := store.In(k.Name)
					checks, err := checkShards(ctx, cfg, fence.Control{Pool: ctl.Pool, Store: ks}, k, repair)
					if err != nil {
						return err
					}
					for _, c := range checks {
						if len(c.Strays) > 0 || len(c.Unplaced) > 0 || (c.Drifting() && len(c.Repaired) == 0) {
							bad++
						}
					}
					kc := keyspaceCheck{Keyspace: k.Name, Shards: checks, Leftovers: left[k.Name]}
					if i == 0 { // objects no plan names belong to no keyspace
						kc.Leftovers = append(kc.Leftovers, left[""]...)
					}
					if kc.Ended, kc.Notes, err = endedMigrations(ctx, ks, live); err != nil {
						return err
					}
					if i == 0 {
						kc.Notes = append(kc.Notes, leftNotes...)
					}
					badMigrations += len(kc.Ended)
					badObjects += len(kc.Leftovers)
					report = append(report, kc)
					if !asJSON {
						topoview.PrintChecks(out, k, checks)
						printEnded(out, kc.Ended, kc.Notes, kc.Leftovers)
					}
				}
				if asJSON {
					if err := topoWriteJSON(out, report); err != nil {
						return err
					}
				}
				var problems []string
				if bad > 0 {
					problems = append(problems, fmt.Sprintf("%d shard(s) differ from the topology", bad))
				}
				if badMigrations > 0 {
					problems = append(problems, fmt.Sprintf("%d migration(s) ended with work left", badMigrations))
				}
				if badObjects > 0 {
					problems = append(problems, fmt.Sprintf("%d slot(s), publication(s) or origin(s) left behind", badObjects))
				}
				if len(problems) > 0 {
					return errors.New(strings.Join(problems, "; "))
				}
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().BoolVar(&repair, "repair", false, "reconcile the fences and guards of drifting shards")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// checkedKeyspaces is what topology check and check placement look at: every
// registered keyspace, or the one named, with the control schema they read
// ready (fence holds; schema step 6, reshard.moves, says which moves still run).
func checkedKeyspaces(ctx context.Context, ctl fence.Control, name string) ([]topology.Keyspace, error) {
	all, err := ctl.Store.Keyspaces(ctx)
	if err != nil {
		return nil, controlErr(err)
	}
	if len(all) == 0 {
		return nil, usageError{topology.ErrNoKeyspace}
	}
	if name != "" {
		k, err := ctl.Store.ResolveKeyspace(ctx, name)
		if err != nil {
			return nil, usageError{err}
		}
		all = []topology.Keyspace{k}
	}
	if err := topology.Migrate(ctx, ctl.Pool); err != nil {
		return nil, controlErr(err)
	}
	return all, nil
}

// checkShards compares (and with repair reconciles) every shard of the
// keyspace (ctl.Store is In it): topocheck.Shards, with the configuration's
// shards.
func checkShards(ctx context.Context, cfg *clusterConfig, ctl fence.Control, k topology.Keyspace, repair bool) ([]topocheck.Shard, error) {
	checks, err := topocheck.Shards(ctx, topocheck.Options{Control: ctl, Keyspace: k, OpenShards: cfg.openShardPools, Repair: repair})
	var ce *topocheck.ControlError
	if errors.As(err, &ce) {
		return nil, controlErr(ce.Err)
	}
	return checks, err
}

// printUnplaced reports rows with a NULL shard key (topoview.PrintUnplaced).
func printUnplaced(out io.Writer, shard string, rows []tableset.NullKeyRows) {
	topoview.PrintUnplaced(out, shard, rows)
}
