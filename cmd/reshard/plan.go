package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/activities"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
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

// pairReport is the preflight of one (source, target) pair.
type pairReport struct {
	movePair
	Rows       int64                  `json:"rows"`
	Bytes      int64                  `json:"bytes"`
	ETASeconds float64                `json:"eta_seconds"`
	Estimates  []tableset.Estimate    `json:"estimates"`
	Problems   []*tableset.Problem    `json:"problems"`
	Warnings   []tableset.Warning     `json:"warnings"`
	Indexes    []tableset.IndexAdvice `json:"indexes"`
}

type planReport struct {
	Request      workflows.MigrationRequest `json:"request"`
	What         string                     `json:"what"`
	FromVersion  int64                      `json:"from_version"`
	ShardsBefore []string                   `json:"shards_before"`
	ShardsAfter  []string                   `json:"shards_after"`
	Moved        float64                    `json:"moved_fraction"`
	Modulo       float64                    `json:"modulo_fraction,omitempty"`
	Ideal        float64                    `json:"ideal_fraction"`
	// Steps and StepMoved: a rebalance one shard at a time.
	Steps        int          `json:"one_at_a_time_steps,omitempty"`
	StepMoved    float64      `json:"one_at_a_time_fraction,omitempty"`
	Moves        []ring.Move  `json:"moves"`
	Pairs        []pairReport `json:"pairs"`
	Rows         int64        `json:"rows"`
	Bytes        int64        `json:"bytes"`
	ETASeconds   float64      `json:"eta_seconds"`
	CutoverSteps []string     `json:"cutover_steps"`
	// Capacity is the predicted cost (nil when preflight found problems:
	// the probe needs the tables it checks).
	Capacity *capacity.Report `json:"capacity,omitempty"`
	Problems int              `json:"problems"`
	// NextSteps: the command that starts this migration, or, with
	// problems, the plan again once they are fixed.
	NextSteps []string `json:"next_steps"`
}

// runPlan runs the preflight of every pair and prints the plan.
func runPlan(ctx context.Context, cmd *cobra.Command, args []string, cfg *clusterConfig, p *migrationPlan, asJSON bool, walWindow time.Duration) error {
	rep, err := preflightPlan(ctx, cfg, p, walWindow)
	if err != nil {
		return err
	}
	rep.NextSteps = planNextSteps(cmd, args, rep.Problems)
	out := cmd.OutOrStdout()
	if asJSON {
		if err := topoWriteJSON(out, rep); err != nil {
			return err
		}
	} else {
		printPlan(out, rep)
		printNextSteps(out, rep.NextSteps)
	}
	if rep.Problems > 0 {
		return usageError{fmt.Errorf("%d preflight problem(s): fix these, nothing was changed", rep.Problems)}
	}
	return nil
}

// planNextSteps: the command that starts the planned migration, or, with
// problems, the plan again once they are fixed.
func planNextSteps(cmd *cobra.Command, args []string, problems int) []string {
	start := startCommand(cmd, args)
	if problems > 0 {
		return []string{"reshard plan" + strings.TrimPrefix(start, "reshard")}
	}
	return []string{start}
}

// preflightPlan runs the PLAN checks of the plan (plan.Checks, as the
// worker's PLAN does: preflight, the capacity probe, the cutover dry run);
// it changes nothing. Problems (capacity refusals among them) are in the
// report, not the error.
func preflightPlan(ctx context.Context, cfg *clusterConfig, p *migrationPlan, walWindow time.Duration) (planReport, error) {
	pools := newLazyShards(cfg, func(name string) error {
		return usageError{fmt.Errorf("shard %s of topology v%d is not in the configuration %s: add its DSN under shards", name, p.From.Version, cfg.Path)}
	})
	defer pools.close()
	r := p.Request
	chk, err := plan.Checks(ctx, pools.open, p.Plan, activities.PlanChecks(r, walWindow, cfg.Capacity))
	if err != nil {
		return planReport{}, err
	}
	rep := planReport{Request: r, What: p.what(), FromVersion: p.From.Version, ShardsBefore: p.From.Ring.Shards(),
		ShardsAfter: p.After.Shards(), Moved: p.Moved, Modulo: p.Modulo, Ideal: p.Ideal, Moves: p.Moves,
		Steps: p.Steps, StepMoved: p.StepMoved, Rows: chk.Rows, Bytes: chk.Bytes, ETASeconds: chk.ETA.Seconds(),
		Capacity: chk.Capacity, CutoverSteps: chk.CutoverSteps, Problems: chk.Problems()}
	for i, m := range chk.Moves {
		rep.Pairs = append(rep.Pairs, pairReport{movePair: p.Pairs[i], Rows: m.Rows(), Bytes: m.Bytes(), ETASeconds: m.ETA.Seconds(),
			Estimates: topoNonNil(m.Estimates), Problems: topoNonNil(m.Problems), Warnings: topoNonNil(m.Warnings), Indexes: topoNonNil(m.Indexes)})
	}
	return rep, nil
}

// problemLines are the preflight problems of a report, one per line with
// its fix, each shard's problem once.
func problemLines(rep planReport) []string {
	var probs []string
	for _, pr := range rep.Pairs {
		for _, pb := range pr.Problems {
			where := pb.Shard
			if pb.Table != "" {
				where += " " + pb.Table
			}
			probs = append(probs, fmt.Sprintf("  [%s] %s: %s\n      fix: %s", pb.Check, where, pb.Problem, pb.Fix))
		}
	}
	if rep.Capacity != nil {
		for _, r := range rep.Capacity.Refusals {
			probs = append(probs, fmt.Sprintf("  [capacity/%s] %s: %s\n      fix: %s", r.Check, r.Shard, r.Problem, r.Fix))
		}
	}
	return dedupe(probs)
}

func printPlan(out io.Writer, rep planReport) {
	r := rep.Request
	fmt.Fprintf(out, "plan: %s (dry run: nothing started, nothing changed)\n", rep.What)
	var tables []string
	for _, t := range r.Tables.Tables {
		tables = append(tables, fmt.Sprintf("%s.%s(%s)", t.Schema, t.Table, t.KeyColumn))
	}
	ks := r.Keyspace
	if ks == "" {
		ks = topology.DefaultKeyspace
	}
	fmt.Fprintf(out, "keyspace %s, topology v%d: %d shard(s) → %d; tables %s\n\n", ks, rep.FromVersion, len(rep.ShardsBefore), len(rep.ShardsAfter), strings.Join(tables, ", "))
	fmt.Fprintf(out, "moved %.2f%% of the token space", 100*rep.Moved)
	switch r.Kind {
	case workflows.KindAddNode:
		fmt.Fprintf(out, "  (hash mod N: %.2f%%, ideal 1/(N+1): %.2f%%)", 100*rep.Modulo, 100*rep.Ideal)
	case workflows.KindSplit:
		fmt.Fprintf(out, "  (hash mod N: %.2f%%, ideal half of %s: %.2f%%)", 100*rep.Modulo, r.Shard, 100*rep.Ideal)
	case workflows.KindRemoveNode:
		fmt.Fprintf(out, "  (hash mod N: %.2f%%, ideal %s's share: %.2f%%)", 100*rep.Modulo, r.Shard, 100*rep.Ideal)
	case workflows.KindRebalance:
		fmt.Fprintf(out, "  (one shard at a time: %.2f%% in %d steps; one plan moves the least possible)", 100*rep.StepMoved, rep.Steps)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)

	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MOVE\tRANGES\tSPACE\tROWS\tBYTES\tETA\tPROBLEMS")
	for _, pr := range rep.Pairs {
		fmt.Fprintf(w, "%s → %s\t%d\t%.2f%%\t%d\t%s\t%s\t%d\n", pr.Source, pr.Target, len(pr.Ranges), 100*pr.Fraction,
			pr.Rows, workflows.HumanBytes(pr.Bytes), etaText(pr.ETASeconds, r.Throttle), len(pr.Problems))
	}
	fmt.Fprintf(w, "total\t%d\t%.2f%%\t%d\t%s\t%s\t%d\n", len(rep.Moves), 100*rep.Moved, rep.Rows, workflows.HumanBytes(rep.Bytes), etaText(rep.ETASeconds, r.Throttle), rep.Problems)
	w.Flush()
	fmt.Fprintf(out, "throttle per move: %s (moves run in parallel; the ETA is the slowest move's copy time)\n", throttleText(r.Throttle))

	fmt.Fprintln(out, "\nranges (lo exclusive, hi inclusive):")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  FROM\tTO\tRANGE")
	for _, m := range rep.Moves {
		fmt.Fprintf(w, "  %s\t%s\t%s\n", m.From, m.To, m.Range)
	}
	w.Flush()

	var advice []string
	missing := map[string]string{} // shard+table → statement
	for _, pr := range rep.Pairs {
		for _, ix := range pr.Indexes {
			if !ix.Present {
				advice = append(advice, fmt.Sprintf("  on %s: %s", ix.Shard, ix.Statement))
				missing[ix.Shard+" "+ix.Table] = ix.Statement
			}
		}
	}
	if advice = dedupe(advice); len(advice) > 0 {
		fmt.Fprintln(out, "\nindex advice (without the token index, copy, verify and cleanup scan the whole table for every range):")
		fmt.Fprintln(out, strings.Join(advice, "\n"))
	}
	var warns []string
	for _, pr := range rep.Pairs {
		for _, wn := range pr.Warnings {
			if st, ok := missing[wn.Shard+" "+wn.Table]; ok && strings.Contains(wn.Message, st) {
				continue // said in the index advice
			}
			warns = append(warns, fmt.Sprintf("  %s %s: %s", wn.Shard, wn.Table, wn.Message))
		}
	}
	if warns = dedupe(warns); len(warns) > 0 {
		fmt.Fprintln(out, "\nwarnings:")
		fmt.Fprintln(out, strings.Join(warns, "\n"))
	}
	if c := rep.Capacity; c != nil {
		fmt.Fprintln(out, "\ncapacity (predicted from a probe of the servers; copy, catch-up and verify run one after the other):")
		capacity.WriteText(out, capacity.Report{Moves: c.Moves, Shards: c.Shards, Warnings: c.Warnings, Probes: c.Probes})
	}
	fmt.Fprintf(out, "\ncutover of each move (shown for %s → %s; budget %s):\n", rep.Pairs[0].Source, rep.Pairs[0].Target, r.CutoverBudget)
	for _, s := range rep.CutoverSteps {
		fmt.Fprintln(out, "  "+s)
	}
	if probs := problemLines(rep); len(probs) > 0 {
		fmt.Fprintln(out, "\nproblems (fix these, nothing was changed):")
		fmt.Fprintln(out, strings.Join(probs, "\n"))
	} else {
		fmt.Fprintf(out, "\npreflight passed; start it with: reshard %s\n", startHint(r))
	}
}

func etaText(secs float64, t workflows.Throttle) string {
	if t.RowsPerSec == 0 && t.BytesPerSec == 0 {
		return "unthrottled"
	}
	return time.Duration(secs * float64(time.Second)).Round(time.Second).String()
}

// dedupe drops repeated lines (a shard in several pairs reports once), keeping order.
func dedupe(lines []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lines {
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// startHint is the command that starts what was planned.
func startHint(r workflows.MigrationRequest) string {
	var b strings.Builder
	switch r.Kind {
	case workflows.KindSplit:
		fmt.Fprintf(&b, "split %s --into %s", r.Shard, r.Into)
	case workflows.KindMove:
		fmt.Fprintf(&b, "move --range %d:%d --to %s", r.Range.Lo, r.Range.Hi, r.To)
	case workflows.KindRebalance:
		b.WriteString("rebalance")
		if len(r.Add) > 0 {
			fmt.Fprintf(&b, " --add %s", strings.Join(r.Add, ","))
		}
		if len(r.Remove) > 0 {
			fmt.Fprintf(&b, " --remove %s", strings.Join(r.Remove, ","))
		}
		names := make([]string, 0, len(r.Weights))
		for name := range r.Weights {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			fmt.Fprintf(&b, " --weight %s=%g", name, r.Weights[name])
		}
	default:
		fmt.Fprintf(&b, "%s %s", r.Kind, r.Shard)
	}
	if r.Keyspace != "" && r.Keyspace != topology.DefaultKeyspace {
		fmt.Fprintf(&b, " --keyspace %s", r.Keyspace)
	}
	// The keyspace's tables move: no --table needed.
	return b.String() + " [same flags]"
}
