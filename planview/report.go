package planview

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// PairReport is the preflight of one (source, target) pair.
type PairReport struct {
	Pair
	Rows       int64                  `json:"rows"`
	Bytes      int64                  `json:"bytes"`
	ETASeconds float64                `json:"eta_seconds"`
	Estimates  []tableset.Estimate    `json:"estimates"`
	Problems   []*tableset.Problem    `json:"problems"`
	Warnings   []tableset.Warning     `json:"warnings"`
	Indexes    []tableset.IndexAdvice `json:"indexes"`
}

// Report is reshard plan's report of a plan and its checks.
type Report struct {
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
	Pairs        []PairReport `json:"pairs"`
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

// NewReport is the report of plan p and its checks chk (plan.Checks).
func NewReport(p *Plan, chk plan.Check) Report {
	rep := Report{Request: p.Request, What: p.What(), FromVersion: p.From.Version, ShardsBefore: p.From.Ring.Shards(),
		ShardsAfter: p.After.Shards(), Moved: p.Moved, Modulo: p.Modulo, Ideal: p.Ideal, Moves: p.Moves,
		Steps: p.Steps, StepMoved: p.StepMoved, Rows: chk.Rows, Bytes: chk.Bytes, ETASeconds: chk.ETA.Seconds(),
		Capacity: chk.Capacity, CutoverSteps: chk.CutoverSteps, Problems: chk.Problems()}
	for i, m := range chk.Moves {
		rep.Pairs = append(rep.Pairs, PairReport{Pair: p.Pairs[i], Rows: m.Rows(), Bytes: m.Bytes(), ETASeconds: m.ETA.Seconds(),
			// Copies: JSON says [] rather than null for none.
			Estimates: append([]tableset.Estimate{}, m.Estimates...), Problems: append([]*tableset.Problem{}, m.Problems...),
			Warnings: append([]tableset.Warning{}, m.Warnings...), Indexes: append([]tableset.IndexAdvice{}, m.Indexes...)})
	}
	return rep
}

// ProblemLines are the preflight problems of a report, one per line with
// its fix, each shard's problem once.
func ProblemLines(rep Report) []string {
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

// Write writes the report as text.
func Write(out io.Writer, rep Report) {
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
	fmt.Fprintf(out, "throttle per move: %s (moves run in parallel; the ETA is the slowest move's copy time)\n", r.Throttle.Text())
	fmt.Fprintln(out, r.StreamText())

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
	if probs := ProblemLines(rep); len(probs) > 0 {
		fmt.Fprintln(out, "\nproblems (fix these, nothing was changed):")
		fmt.Fprintln(out, strings.Join(probs, "\n"))
	} else {
		fmt.Fprintf(out, "\npreflight passed; start it with: reshard %s\n", StartHint(r))
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

// StartHint is the command that starts what was planned.
func StartHint(r workflows.MigrationRequest) string {
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
