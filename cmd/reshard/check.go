package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// keyspaceCheck is what topology check found in one keyspace.
type keyspaceCheck struct {
	Keyspace string       `json:"keyspace"`
	Shards   []shardCheck `json:"shards"`
	// Ended: migrations whose workflow ended with moves not ended.
	Ended []endedMigration `json:"ended_migrations,omitempty"`
	// Leftovers: slots, publications and origins no live move uses.
	Leftovers []leftover `json:"leftovers,omitempty"`
	Notes     []string   `json:"notes,omitempty"`
}

// shardCheck is what topology check found on one shard.
type shardCheck struct {
	Shard  string        `json:"shard"`
	Want   fence.Want    `json:"want"`
	Have   []fence.Have  `json:"have"`
	Drift  []string      `json:"drift"`
	Strays []fence.Stray `json:"strays,omitempty"`
	// Unplaced: rows with a NULL shard key, which no shard owns.
	Unplaced []tableset.NullKeyRows `json:"unplaced,omitempty"`
	Repaired []string               `json:"repaired,omitempty"`
	Skipped  string                 `json:"skipped,omitempty"`
	// InTransition names the cutovers (or rollbacks' reverse cutovers)
	// midway on this shard while it was read: its fences change as they
	// go, so a difference from the topology is theirs, not drift (Drift
	// lists it; it is not repaired and does not fail the check).
	InTransition []string `json:"in_transition,omitempty"`
}

// drifting: a difference no cutover in progress explains.
func (c shardCheck) drifting() bool { return len(c.Drift) > 0 && len(c.InTransition) == 0 }

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
			return withControl(cmd, opts, &cf, 10*time.Minute, func(ctx context.Context, cfg *clusterConfig, store *topology.Store, pool *pgxpool.Pool) error {
				all, err := checkedKeyspaces(ctx, store, pool, *keyspace)
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
					checks, err := checkShards(ctx, cfg, ks, fence.Control{Pool: pool, Store: ks}, k, repair)
					if err != nil {
						return err
					}
					for _, c := range checks {
						if len(c.Strays) > 0 || len(c.Unplaced) > 0 || (c.drifting() && len(c.Repaired) == 0) {
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
						printChecks(out, k, checks)
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
func checkedKeyspaces(ctx context.Context, store *topology.Store, pool *pgxpool.Pool, name string) ([]topology.Keyspace, error) {
	all, err := store.Keyspaces(ctx)
	if err != nil {
		return nil, controlErr(err)
	}
	if len(all) == 0 {
		return nil, usageError{topology.ErrNoKeyspace}
	}
	if name != "" {
		k, err := store.ResolveKeyspace(ctx, name)
		if err != nil {
			return nil, usageError{err}
		}
		all = []topology.Keyspace{k}
	}
	if err := topology.Migrate(ctx, pool); err != nil {
		return nil, controlErr(err)
	}
	return all, nil
}

// checkShards compares (and with repair reconciles) every shard of the
// keyspace.
func checkShards(ctx context.Context, cfg *clusterConfig, store *topology.Store, ctl fence.Control, k topology.Keyspace, repair bool) ([]shardCheck, error) {
	t, err := store.Current(ctx)
	if err != nil {
		return nil, controlErr(err)
	}
	reg, err := store.Shards(ctx)
	if err != nil {
		return nil, controlErr(err)
	}
	running, err := store.RunningMoves(ctx)
	if err != nil {
		return nil, controlErr(err)
	}
	members := map[string]bool{}
	for _, n := range keyspaceShards(t) {
		members[n] = true
	}
	var names []string
	for _, s := range reg {
		names = append(names, s.Name)
	}
	for n := range members {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	pools, closeAll, err := cfg.openShardPools(ctx, names)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	// The cutover journals of the running moves, read before and after the
	// shards: a cutover midway at either read, or that moved on between
	// them, changed fences under the look.
	journals, err := runningJournals(ctx, store, running)
	if err != nil {
		return nil, err
	}
	before, err := cutover.LastSteps(ctx, ctl.Pool, slices.Collect(maps.Keys(journals)))
	if err != nil {
		return nil, err
	}
	sets := map[string]tableset.Set{}
	var out []shardCheck
	for _, n := range names {
		c := shardCheck{Shard: n}
		set, err := tableset.Introspect(ctx, pools[n], k.Spec(), "shard "+n)
		if err != nil {
			var p *tableset.Problem
			if !members[n] && errors.As(err, &p) {
				c.Skipped = "not in the ring and without the keyspace's tables"
				out = append(out, c)
				continue
			}
			return nil, err
		}
		if c.Have, err = fence.Inspect(ctx, pools[n], set); err != nil {
			return nil, err
		}
		if !members[n] && !slices.ContainsFunc(c.Have, func(h fence.Have) bool { return h.Trigger }) {
			c.Skipped = "not in the keyspace: not in its ring, never fenced for it"
			out = append(out, c)
			continue
		}
		if c.Want, err = ctl.Want(ctx, n); err != nil {
			return nil, err
		}
		for _, d := range fence.Compare(n, c.Want, c.Have) {
			c.Drift = append(c.Drift, d.String())
		}
		sets[n] = set
		if c.Strays, err = fence.Strays(ctx, pools[n], set, strayOutsideMoves(fence.StraySpace(t, n), n, running)); err != nil {
			return nil, err
		}
		if c.Unplaced, err = tableset.NullKeys(ctx, pools[n], set); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	after, err := cutover.LastSteps(ctx, ctl.Pool, slices.Collect(maps.Keys(journals)))
	if err != nil {
		return nil, err
	}
	moving := cutover.InTransition(before, after, time.Now())
	for i := range out {
		c := &out[i]
		if len(c.Drift) == 0 {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(moving)) {
			if j := journals[name]; j.touches(c.Shard) {
				c.InTransition = append(c.InTransition, j.describe(moving[name]))
			}
		}
		if repair && c.drifting() { // never against a cutover in progress
			n := c.Shard
			ch, err := fence.Reconcile(ctx, pools[n], n, sets[n], ctl)
			if err != nil {
				return nil, err
			}
			c.Repaired = append(append(append(c.Repaired, ch.Refenced...), ch.GuardsOn...), ch.GuardsOff...)
			for _, t := range ch.Recompiled {
				c.Repaired = append(c.Repaired, t+" (fence functions compiled again from the registry)")
			}
			if ch.Installed {
				c.Repaired = append(c.Repaired, "fence triggers installed")
			}
		}
	}
	return out, nil
}

// journalOf is a cutover journal of a running move: the forward cutover's
// or its rollback's reverse one.
type journalOf struct {
	move     topology.PlannedMove
	reversed bool
}

func (j journalOf) touches(shard string) bool { return j.move.From == shard || j.move.To == shard }

func (j journalOf) describe(l cutover.Last) string {
	what := fmt.Sprintf("the cutover of move %s (%s → %s)", j.move.ID, j.move.From, j.move.To)
	if j.reversed {
		what = fmt.Sprintf("the rollback's reverse cutover of move %s (%s → %s)", j.move.ID, j.move.To, j.move.From)
	}
	return fmt.Sprintf("%s, at step %s since %s", what, l.Step, l.At.UTC().Format("15:04:05"))
}

// runningJournals names the cutover journals of the keyspace's running
// moves, from their migrations' stored plans.
func runningJournals(ctx context.Context, store *topology.Store, running []topology.RunningMove) (map[string]journalOf, error) {
	out := map[string]journalOf{}
	plans := map[string][]topology.PlannedMove{}
	for _, r := range running {
		pm, ok := plans[r.MigrationID]
		if !ok {
			p, err := store.LoadPlan(ctx, r.MigrationID)
			if err != nil {
				return nil, controlErr(err)
			}
			pm = p.PlannedMoves()
			plans[r.MigrationID] = pm
		}
		for _, m := range pm {
			if m.From == r.From && m.To == r.To {
				out[m.ID] = journalOf{move: m}
				out[rollback.ReverseJournal(m.ID)] = journalOf{move: m, reversed: true}
			}
		}
	}
	return out, nil
}

// strayOutsideMoves takes out of space the ranges of running moves from or
// to shard: a move's two shards both hold its rows until it ends, even once
// its ranges are published stable (cleanup deletes the old owner's rows
// after that publish).
func strayOutsideMoves(space []ring.Range, shard string, running []topology.RunningMove) []ring.Range {
	for _, m := range running {
		if m.From != shard && m.To != shard {
			continue
		}
		var left []ring.Range
		for _, r := range space {
			left = append(left, ring.Subtract(r, m.Ranges)...)
		}
		space = left
	}
	return ring.Normalize(space)
}

func printChecks(out io.Writer, k topology.Keyspace, checks []shardCheck) {
	fmt.Fprintf(out, "keyspace %s, %d table(s)\n", k.Name, len(k.Tables))
	for _, c := range checks {
		switch {
		case c.Skipped != "":
			fmt.Fprintf(out, "%-10s skipped: %s\n", c.Shard, c.Skipped)
			continue
		case len(c.Drift) == 0 && len(c.Strays) == 0 && len(c.Unplaced) == 0:
			guard := "off"
			if c.Want.Guard {
				guard = "on"
			}
			fmt.Fprintf(out, "%-10s ok: fences as topology v%d wants (%d range(s)), TRUNCATE guard %s\n", c.Shard, c.Want.Version, len(c.Want.Ranges), guard)
			continue
		}
		if len(c.InTransition) > 0 {
			for _, tr := range c.InTransition {
				fmt.Fprintf(out, "%-10s in transition: %s; its fences change as it goes, check again once it ends\n", c.Shard, tr)
			}
			for _, d := range c.Drift {
				fmt.Fprintf(out, "%-10s   (meanwhile %s)\n", c.Shard, d)
			}
			for _, s := range c.Strays {
				fmt.Fprintf(out, "%-10s misplaced: %d row(s) of %s in ranges it does not own (keys %s)\n", c.Shard, s.Rows, s.Table, strings.Join(s.Samples, ", "))
			}
			printUnplaced(out, c.Shard, c.Unplaced)
			continue
		}
		for _, d := range c.Drift {
			fmt.Fprintf(out, "%-10s drift: %s\n", c.Shard, d)
		}
		if len(c.Repaired) > 0 {
			fmt.Fprintf(out, "%-10s repaired: %s\n", c.Shard, strings.Join(c.Repaired, ", "))
		} else if len(c.Drift) > 0 {
			fmt.Fprintf(out, "%-10s fix: reshard topology check --repair\n", c.Shard)
		}
		for _, s := range c.Strays {
			fmt.Fprintf(out, "%-10s misplaced: %d row(s) of %s in ranges it does not own (keys %s)\n", c.Shard, s.Rows, s.Table, strings.Join(s.Samples, ", "))
		}
		printUnplaced(out, c.Shard, c.Unplaced)
	}
}

// printUnplaced reports rows with a NULL shard key: owned by no shard.
func printUnplaced(out io.Writer, shard string, rows []tableset.NullKeyRows) {
	for _, u := range rows {
		fmt.Fprintf(out, "%-10s not placed: %d row(s) of %s with a NULL shard key, owned by no shard (primary keys %s): give them a key or delete them, then ALTER TABLE ... ALTER COLUMN ... SET NOT NULL\n",
			shard, u.Rows, u.Table, strings.Join(u.Samples, ", "))
	}
}
