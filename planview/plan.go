package planview

import (
	"fmt"
	"strings"

	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/statusview"
	"github.com/reshard/reshard/workflows"
)

// Pair is the ranges going from one source to one target: one Move
// workflow, one slot on the source. ID is the move's id (none in a dry run,
// which names nothing).
type Pair struct {
	ID       string       `json:"id,omitempty"`
	Source   string       `json:"source"`
	Target   string       `json:"target"`
	Ranges   []ring.Range `json:"ranges"`
	Fraction float64      `json:"fraction"`
}

// Plan is what a request does to the current topology: the plan the
// worker's PLAN stores (plan.Compute), and its moves as pairs.
type Plan struct {
	Request workflows.MigrationRequest
	plan.Plan
	Pairs []Pair
}

// New is the plan p of request req, with its moves as pairs.
func New(req workflows.MigrationRequest, p plan.Plan) *Plan {
	v := &Plan{Request: req, Plan: p}
	for _, m := range p.Grouped {
		v.Pairs = append(v.Pairs, Pair{ID: m.ID, Source: m.From, Target: m.To, Ranges: m.Ranges, Fraction: plan.Fraction(m)})
	}
	return v
}

// What says in a few words what the migration does.
func (p *Plan) What() string {
	if r := p.Request; r.Kind == workflows.KindRebalance {
		return "rebalance: " + RebalanceText(r)
	}
	return statusview.RequestText(p.Request)
}

// RebalanceText is a rebalance's target, e.g. "add e,f; remove a; weight b=2".
func RebalanceText(r workflows.MigrationRequest) string {
	return ring.Change{Add: r.Add, Remove: r.Remove, Weights: r.Weights}.Target().String()
}

// Summary is the one-line StaticSummary of the workflow.
func (p *Plan) Summary() string {
	var tables []string
	for _, t := range p.Request.Tables.Tables {
		tables = append(tables, t.Table)
	}
	return fmt.Sprintf("%s: %d move(s), %.2f%% of the token space, tables %s (from topology v%d)",
		p.What(), len(p.Pairs), 100*p.Moved, strings.Join(tables, ","), p.From.Version)
}

// Details is the markdown StaticDetails of the workflow: the plan.
func (p *Plan) Details() string {
	r := p.Request
	var b strings.Builder
	fmt.Fprintf(&b, "### %s (migration `%s`)\n\n", p.What(), r.ID)
	fmt.Fprintf(&b, "From topology v%d: %d shard(s) → %d. Moves **%.2f%%** of the token space", p.From.Version, len(p.From.Ring.Shards()), len(p.After.Shards()), 100*p.Moved)
	if p.Modulo > 0 {
		fmt.Fprintf(&b, " (hash-mod-N would move %.2f%%; the least possible is %.2f%%)", 100*p.Modulo, 100*p.Ideal)
	}
	b.WriteString(".\n\n")
	var tables []string
	for _, t := range r.Tables.Tables {
		tables = append(tables, fmt.Sprintf("`%s.%s(%s)`", t.Schema, t.Table, t.KeyColumn))
	}
	fmt.Fprintf(&b, "Tables (set `%s`): %s\n\n", r.Tables.Name, strings.Join(tables, ", "))
	b.WriteString("| source | target | ranges | token space |\n|---|---|---:|---:|\n")
	for _, pr := range p.Pairs {
		fmt.Fprintf(&b, "| %s | %s | %d | %.2f%% |\n", pr.Source, pr.Target, len(pr.Ranges), 100*pr.Fraction)
	}
	// Static details never change: the throttle here is the starting one,
	// and says where the one in force is.
	fmt.Fprintf(&b, "\nThrottle per move at the start: %s (reshard throttle changes it; the current details show the one in force). Chunk: %d rows. Approval before cutover: %v. On verify failure: %s. Cutover budget: %s. Max lag: %s. Grace: %s. The moves %s.\n",
		r.Throttle.Text(), r.ChunkRows, r.RequireApproval, r.OnVerifyFail, r.CutoverBudget, workflows.HumanBytes(r.MaxLagBytes), r.Grace(), r.StreamText())
	return b.String()
}
