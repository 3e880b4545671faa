package main

import (
	"bufio"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topoview"
)

func newRingCmd(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ring",
		Short: "Tokens, ring plans, the scale-out simulation, and the current ring (show)",
	}
	// show reads the control database; it lives with the topology commands.
	cmd.AddCommand(newRingTokenCmd(), newRingPlanCmd(), newRingSimulateCmd(), newRingShowCmd(opts))
	return cmd
}

func newRingTokenCmd() *cobra.Command {
	var keyType string
	cmd := &cobra.Command{
		Use:   "token --type text|bigint|uuid [KEY...]",
		Short: "Print the token of each key: KEY<TAB>TOKEN",
		Long: `Prints the token of each key, the same value PostgreSQL computes with
hashint8extended(k, 0), hashtextextended(k, 0) or uuid_hash_extended(k, 0).
Without KEY arguments, reads keys from standard input, one per line; an empty
line is the empty key.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			return inputErr(ring.EachToken(keyType, args, cmd.InOrStdin(), func(key string, tok int64) error {
				_, err := fmt.Fprintf(w, "%s\t%d\n", key, tok)
				return err
			}))
		},
	}
	cmd.Flags().StringVar(&keyType, "type", "", "key type: text, bigint or uuid (also integer, smallint, varchar)")
	return cmd
}

// splitNames reads a comma-separated list of shard names; each once
// (ring.ParseNames).
func splitNames(flag, v string) ([]string, error) {
	names, err := ring.ParseNames(flag, v)
	return names, inputErr(err)
}

// parseWeights reads --weight name=w flags (ring.ParseWeights).
func parseWeights(flags []string) (map[string]float64, error) {
	ws, err := ring.ParseWeights(flags)
	return ws, inputErr(err)
}

func newRingPlanCmd() *cobra.Command {
	var (
		req    ring.PlanRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "plan --shards a,b,c,d (--add e,f --remove a --weight b=2 | --split a | --move lo:hi --to e) [--json]",
		Short: "Print the moves that take a ring to its next shape",
		Long: `Builds the ring of --shards (--vnodes per unit of weight, --tokens balanced or
hash) and prints the ranges that change owner. One rebalance: --add shards,
--remove shards and set --weight name=w (of a shard that stays or one added),
any of them together, planned as one change with the least movement; or
--split a shard (into --into, default <shard>-2); or --move a range (lo:hi, lo
exclusive, hi inclusive) --to a shard. Ranges are (lo, hi]; a range crossing
the wrap is two moves, (x, MaxInt64] and [MinInt64, y].

A rebalance of more than one shard also prints what the same change moves one
shard at a time (an add-node per added shard, then a remove-node per removed
one, then the weights), as a sequence of migrations would.`,
		Example: `  reshard ring plan --shards a,b,c,d --add e,f,g,h
  reshard ring plan --shards a,b,c,d --add e --remove a --weight b=2 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, moves, steps, err := req.Plan()
			if err != nil {
				return inputErr(err)
			}
			return topoview.PrintRingPlan(cmd.OutOrStdout(), moves, steps, o, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Shards, "shards", "", "current shards, comma-separated (required)")
	f.IntVar(&req.VNodes, "vnodes", 16, "vnodes per shard (per unit of weight)")
	f.StringVar(&req.Tokens, "tokens", "balanced", "token allocation: balanced or hash")
	f.StringVar(&req.Add, "add", "", "add these shards, comma-separated")
	f.StringVar(&req.Split, "split", "", "split this shard in two")
	f.StringVar(&req.Into, "into", "", "name of the shard a --split creates (default <shard>-2)")
	f.StringVar(&req.Remove, "remove", "", "remove these shards, comma-separated")
	f.StringArrayVar(&req.Weights, "weight", nil, "shard=weight (repeatable or comma-separated): the weight of a shard that stays or is added")
	f.StringVar(&req.Move, "move", "", "move the range lo:hi or (lo,hi] (lo exclusive, hi inclusive) --to a shard")
	f.StringVar(&req.To, "to", "", "the shard receiving a --move")
	f.BoolVar(&asJSON, "json", false, `print {"moves":[{"lo","hi","from","to"},...]}`)
	return cmd
}

func newRingSimulateCmd() *cobra.Command {
	var (
		req    ring.SimRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "simulate --shards 4 --add 1 [--vnodes 16] [--keys 1000000] [--algo all] [--json]",
		Short: "Compare how many keys move, and how even the load is, when shards are added",
		Long: `Maps --keys sample keys ("key-<i>", tokens by hashtextextended) to --shards
shards and again after adding --add shards, for each algorithm: modulo (token
mod N), ring-hash (vnodes at the tokens of "<shard>#<i>"), ring-balanced
(reshard's default allocation), rendezvous, jump (Lamping-Veach) and slots
(16384 fixed slots, reassigned minimally). Reports the fraction of keys moved,
the ideal add/(shards+add), and max_over_mean: the most loaded shard's keys over
the mean. "tokens" is vnodes per shard for the rings, the slot count for slots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			so, err := req.Options()
			if err != nil {
				return inputErr(err)
			}
			res, err := ring.Simulate(so)
			if err != nil {
				return err
			}
			return topoview.PrintSimulation(cmd.OutOrStdout(), so, res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&req.Shards, "shards", 4, "shards before the change")
	f.IntVar(&req.Add, "add", 1, "shards added")
	f.IntVar(&req.VNodes, "vnodes", 16, "vnodes per shard for the ring algorithms")
	f.IntVar(&req.Keys, "keys", 1_000_000, "sample keys")
	f.StringVar(&req.Algo, "algo", "all", "all, or a comma-separated list of "+strings.Join(ring.Algorithms, ", "))
	f.BoolVar(&asJSON, "json", false, `print a JSON array of {"algo","tokens","moved_fraction","ideal_fraction","max_over_mean"}`)
	return cmd
}
