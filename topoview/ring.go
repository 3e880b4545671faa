package topoview

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/reshard/reshard/ring"
)

// RingPlan is `reshard ring plan --json` (the same for every kind of
// change).
type RingPlan struct {
	Moves []ring.Move `json:"moves"`
}

// PrintRingPlan prints the moves of a ring plan made with o (and, for a
// rebalance of more than one shard, how it compares with its steps one
// shard at a time), or their JSON.
func PrintRingPlan(out io.Writer, moves []ring.Move, steps [][]ring.Move, o ring.Options, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(out).Encode(RingPlan{Moves: moves})
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "FROM\tTO\tLO (excl)\tHI (incl)\tFRACTION\t")
	for _, m := range moves {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.6f\t\n", m.From, m.To, m.Range.Lo, m.Range.Hi, m.Range.Width()/18446744073709551616.0)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d moves, moved fraction %.4f of the token space (%s tokens, %d vnodes per shard)\n",
		len(moves), ring.MovedFraction(moves), o.Tokens, o.VNodes)
	if err != nil || len(steps) < 2 {
		return err
	}
	seq, one, ratio := ring.CompareSteps(moves, steps)
	_, err = fmt.Fprintf(out, "one shard at a time: %d steps, moved fraction %.4f; one rebalance moves %.4f (%.0f%% of it)\n",
		len(steps), seq, one, 100*ratio)
	return err
}

// PrintSimulation prints ring.Simulate's results for o, or their JSON.
func PrintSimulation(out io.Writer, o ring.SimOptions, res []ring.SimResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(out).Encode(res)
	}
	fmt.Fprintf(out, "%d shards + %d, %d keys, ideal moved fraction %.4f\n", o.Shards, o.Add, o.Keys, float64(o.Add)/float64(o.Shards+o.Add))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ALGO\tTOKENS\tMOVED\tIDEAL\tMAX/MEAN")
	for _, r := range res {
		fmt.Fprintf(tw, "%s\t%d\t%.4f\t%.4f\t%.4f\n", r.Algo, r.Tokens, r.MovedFraction, r.IdealFraction, r.MaxOverMean)
	}
	return tw.Flush()
}
