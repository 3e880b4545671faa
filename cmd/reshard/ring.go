package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
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
			kt, err := parseTokenType(keyType)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			emit := func(key string) error {
				tok, err := ring.TokenOf(kt, key)
				if err != nil {
					return usageError{fmt.Errorf("%w; give keys in PostgreSQL's text form for --type %s", err, keyType)}
				}
				_, err = fmt.Fprintf(w, "%s\t%d\n", key, tok)
				return err
			}
			if len(args) > 0 {
				for _, k := range args {
					if err := emit(k); err != nil {
						return err
					}
				}
				return nil
			}
			return eachLine(cmd.InOrStdin(), emit)
		},
	}
	cmd.Flags().StringVar(&keyType, "type", "", "key type: text, bigint or uuid (also integer, smallint, varchar)")
	return cmd
}

func parseTokenType(s string) (ring.KeyType, error) {
	if s == "" {
		return "", usageError{fmt.Errorf("--type is required: text, bigint or uuid")}
	}
	kt, err := ring.ParseKeyType(s)
	if err != nil {
		return "", usageError{fmt.Errorf("--type %q: want text, bigint or uuid", s)}
	}
	return kt, nil
}

// eachLine calls fn with each line of r without its line ending; a final
// line without a newline counts, a trailing newline does not add an empty key.
func eachLine(r io.Reader, fn func(string) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if len(line) > 0 {
			line = strings.TrimSuffix(line, "\n")
			line = strings.TrimSuffix(line, "\r")
			if ferr := fn(line); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read keys from stdin: %w", err)
		}
	}
}

// ringFlags are the ring shape flags shared by plan.
type ringFlags struct {
	shards string
	vnodes int
	tokens string
}

func (f *ringFlags) options() (ring.Options, error) {
	if f.vnodes < 1 {
		return ring.Options{}, usageError{fmt.Errorf("--vnodes %d: give 1 or more vnodes per shard", f.vnodes)}
	}
	mode, err := ring.ParseAllocation(f.tokens)
	if err != nil {
		return ring.Options{}, usageError{fmt.Errorf("--tokens %q: want balanced or hash", f.tokens)}
	}
	return ring.Options{VNodes: f.vnodes, Tokens: mode}, nil
}

func (f *ringFlags) shardList() ([]ring.Shard, error) {
	var out []ring.Shard
	seen := map[string]bool{}
	for _, name := range strings.Split(f.shards, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, usageError{fmt.Errorf("--shards: %s is listed twice; give each shard once", name)}
		}
		seen[name] = true
		out = append(out, ring.Shard{Name: name})
	}
	if len(out) == 0 {
		return nil, usageError{fmt.Errorf("--shards is empty: give the current shards, e.g. --shards a,b,c,d")}
	}
	return out, nil
}

// splitNames reads a comma-separated list of shard names; each once.
func splitNames(flag, v string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if slices.Contains(out, name) {
			return nil, usageError{fmt.Errorf("%s: %s is listed twice; give each shard once", flag, name)}
		}
		out = append(out, name)
	}
	return out, nil
}

// parseWeights reads --weight name=w flags (repeatable, or comma-separated).
func parseWeights(flags []string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, f := range flags {
		for _, kv := range strings.Split(f, ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			name, v, ok := strings.Cut(kv, "=")
			w, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			name = strings.TrimSpace(name)
			if !ok || name == "" || err != nil || !(w > 0) || math.IsInf(w, 0) {
				return nil, usageError{fmt.Errorf("--weight %q: want shard=weight with a positive weight, e.g. --weight a=2", kv)}
			}
			if _, dup := out[name]; dup {
				return nil, usageError{fmt.Errorf("--weight: %s is given twice; give each shard's weight once", name)}
			}
			out[name] = w
		}
	}
	return out, nil
}

func newRingPlanCmd() *cobra.Command {
	var (
		rf                           ringFlags
		add, split, into, remove, mv string
		to                           string
		weights                      []string
		asJSON                       bool
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
			shards, err := rf.shardList()
			if err != nil {
				return err
			}
			o, err := rf.options()
			if err != nil {
				return err
			}
			adds, err := splitNames("--add", add)
			if err != nil {
				return err
			}
			removes, err := splitNames("--remove", remove)
			if err != nil {
				return err
			}
			ws, err := parseWeights(weights)
			if err != nil {
				return err
			}
			rebalance := add != "" || remove != "" || len(weights) > 0
			ops := 0
			for _, on := range []bool{rebalance, split != "", mv != ""} {
				if on {
					ops++
				}
			}
			if ops != 1 {
				return usageError{fmt.Errorf("give --add, --remove and --weight (one rebalance, together or alone), or --split, or --move: exactly one kind of change")}
			}
			old, err := ring.Build(shards, o)
			if err != nil {
				return usageError{fmt.Errorf("--shards: %w", err)}
			}
			ch := ringChange{adds: adds, removes: removes, weights: ws, remove: remove, split: split, into: into, move: mv, to: to, rebalance: rebalance}
			moves, steps, err := ch.plan(old, len(shards), o)
			if err != nil {
				return err
			}
			return topoview.PrintRingPlan(cmd.OutOrStdout(), moves, steps, o, asJSON)
		},
	}
	f := cmd.Flags()
	f.StringVar(&rf.shards, "shards", "", "current shards, comma-separated (required)")
	f.IntVar(&rf.vnodes, "vnodes", 16, "vnodes per shard (per unit of weight)")
	f.StringVar(&rf.tokens, "tokens", "balanced", "token allocation: balanced or hash")
	f.StringVar(&add, "add", "", "add these shards, comma-separated")
	f.StringVar(&split, "split", "", "split this shard in two")
	f.StringVar(&into, "into", "", "name of the shard a --split creates (default <shard>-2)")
	f.StringVar(&remove, "remove", "", "remove these shards, comma-separated")
	f.StringArrayVar(&weights, "weight", nil, "shard=weight (repeatable or comma-separated): the weight of a shard that stays or is added")
	f.StringVar(&mv, "move", "", "move the range lo:hi or (lo,hi] (lo exclusive, hi inclusive) --to a shard")
	f.StringVar(&to, "to", "", "the shard receiving a --move")
	f.BoolVar(&asJSON, "json", false, `print {"moves":[{"lo","hi","from","to"},...]}`)
	return cmd
}

// ringChange is the change ring plan was asked for (one kind of it).
type ringChange struct {
	adds, removes       []string
	weights             map[string]float64
	remove, split, into string
	move, to            string
	rebalance           bool
}

// plan checks the change against old (nshards: how many --shards) and
// plans it: the moves, and for a rebalance its steps one shard at a time.
func (c ringChange) plan(old *ring.Ring, nshards int, o ring.Options) (moves []ring.Move, steps [][]ring.Move, err error) {
	adds, removes, ws, remove, split, into, mv, to := c.adds, c.removes, c.weights, c.remove, c.split, c.into, c.move, c.to
	switch {
	case c.rebalance:
		for _, a := range adds {
			if old.HasShard(a) {
				return nil, nil, usageError{fmt.Errorf("--add %s: the ring already has a shard %s; give a new name", a, a)}
			}
		}
		for _, r := range removes {
			if !old.HasShard(r) {
				return nil, nil, usageError{fmt.Errorf("--remove %s: no such shard; give one of --shards (%s)", r, strings.Join(old.Shards(), ","))}
			}
		}
		if len(removes) >= nshards && len(adds) == 0 {
			return nil, nil, usageError{fmt.Errorf("--remove %s: that is every shard; a ring needs at least one", remove)}
		}
		for name := range ws {
			if !old.HasShard(name) && !slices.Contains(adds, name) {
				return nil, nil, usageError{fmt.Errorf("--weight %s: no such shard; give one of --shards (%s) or of --add", name, strings.Join(old.Shards(), ","))}
			}
			if slices.Contains(removes, name) {
				return nil, nil, usageError{fmt.Errorf("--weight %s: the shard is removed; drop its weight or keep it", name)}
			}
		}
		rc := ring.Change{Kind: "rebalance", Add: adds, Remove: removes, Weights: ws, Opts: o}
		_, moves, err = ring.PlanChange(old, nil, rc)
		if err != nil {
			return nil, nil, usageError{err}
		}
		if steps, err = ring.PlanSteps(old, rc.Target(), o); err != nil {
			return nil, nil, usageError{err}
		}
	case split != "":
		if !old.HasShard(split) {
			return nil, nil, usageError{fmt.Errorf("--split %s: no such shard; give one of --shards (%s)", split, strings.Join(old.Shards(), ","))}
		}
		if into == "" {
			into = split + "-2"
		}
		if old.HasShard(into) {
			return nil, nil, usageError{fmt.Errorf("--into %s: the ring already has a shard %s; give a new name", into, into)}
		}
		_, moves, err = ring.PlanSplit(old, split, ring.Shard{Name: into}, o)
	default:
		rg, perr := ring.ParseRange(mv)
		if perr != nil {
			return nil, nil, usageError{fmt.Errorf("--move: %w", perr)}
		}
		if to == "" {
			return nil, nil, usageError{fmt.Errorf("--move needs --to: the shard receiving the range")}
		}
		_, moves, err = ring.PlanMove(old, rg, to)
	}
	if err != nil {
		return nil, nil, err
	}
	if moves == nil {
		moves = []ring.Move{}
	}
	return moves, steps, nil
}

func newRingSimulateCmd() *cobra.Command {
	var (
		shards, add, vnodes, keys int
		algo                      string
		asJSON                    bool
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
			switch {
			case shards < 1:
				return usageError{fmt.Errorf("--shards %d: give 1 or more shards", shards)}
			case add < 1:
				return usageError{fmt.Errorf("--add %d: give 1 or more shards to add", add)}
			case vnodes < 1:
				return usageError{fmt.Errorf("--vnodes %d: give 1 or more vnodes per shard", vnodes)}
			case keys < 1:
				return usageError{fmt.Errorf("--keys %d: give 1 or more sample keys", keys)}
			}
			var algos []string
			for _, a := range strings.Split(algo, ",") {
				if a = strings.TrimSpace(a); a != "" {
					if a != "all" && !slices.Contains(ring.Algorithms, a) {
						return usageError{fmt.Errorf("--algo %s: want all or a comma-separated list of %s", a, strings.Join(ring.Algorithms, ", "))}
					}
					algos = append(algos, a)
				}
			}
			so := ring.SimOptions{Shards: shards, Add: add, VNodes: vnodes, Keys: keys, Algos: algos}
			res, err := ring.Simulate(so)
			if err != nil {
				return err
			}
			return topoview.PrintSimulation(cmd.OutOrStdout(), so, res, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&shards, "shards", 4, "shards before the change")
	f.IntVar(&add, "add", 1, "shards added")
	f.IntVar(&vnodes, "vnodes", 16, "vnodes per shard for the ring algorithms")
	f.IntVar(&keys, "keys", 1_000_000, "sample keys")
	f.StringVar(&algo, "algo", "all", "all, or a comma-separated list of "+strings.Join(ring.Algorithms, ", "))
	f.BoolVar(&asJSON, "json", false, `print a JSON array of {"algo","tokens","moved_fraction","ideal_fraction","max_over_mean"}`)
	return cmd
}
