package ring

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The ring commands' requests as an operator writes them (comma-separated
// names, shard=weight, lo:hi): parsed and checked here, so that a request
// is refused the same with or without the CLI. A refusal is an *InputError
// whose message names the flag to fix.

// InputError is a request refused for what it asks (bad input: the CLI's
// exit code 2); other errors are failures.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func badInput(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// PlanRequest is one change of a ring, as ring plan takes it: the current
// shards and the ring's shape, then one kind of change (a rebalance: any
// of Add, Remove and Weights; a Split; or a Move).
type PlanRequest struct {
	Shards      string // current shards, comma-separated
	VNodes      int
	Tokens      string // balanced or hash
	Add, Remove string // comma-separated
	Weights     []string
	Split, Into string
	Move, To    string
}

// Plan checks r and plans it: the ring's options, the moves, and for a
// rebalance its steps one shard at a time.
func (r PlanRequest) Plan() (o Options, moves []Move, steps [][]Move, err error) {
	shards, err := r.shardList()
	if err != nil {
		return o, nil, nil, err
	}
	if r.VNodes < 1 {
		return o, nil, nil, badInput("--vnodes %d: give 1 or more vnodes per shard", r.VNodes)
	}
	mode, err := ParseAllocation(r.Tokens)
	if err != nil {
		return o, nil, nil, badInput("--tokens %q: want balanced or hash", r.Tokens)
	}
	o = Options{VNodes: r.VNodes, Tokens: mode}
	c := change{PlanRequest: r}
	if c.adds, err = ParseNames("--add", r.Add); err != nil {
		return o, nil, nil, err
	}
	if c.removes, err = ParseNames("--remove", r.Remove); err != nil {
		return o, nil, nil, err
	}
	if c.weights, err = ParseWeights(r.Weights); err != nil {
		return o, nil, nil, err
	}
	c.rebalance = r.Add != "" || r.Remove != "" || len(r.Weights) > 0
	ops := 0
	for _, on := range []bool{c.rebalance, r.Split != "", r.Move != ""} {
		if on {
			ops++
		}
	}
	if ops != 1 {
		return o, nil, nil, badInput("give --add, --remove and --weight (one rebalance, together or alone), or --split, or --move: exactly one kind of change")
	}
	old, err := Build(shards, o)
	if err != nil {
		return o, nil, nil, badInput("--shards: %w", err)
	}
	moves, steps, err = c.plan(old, len(shards), o)
	return o, moves, steps, err
}

func (r PlanRequest) shardList() ([]Shard, error) {
	var out []Shard
	seen := map[string]bool{}
	for _, name := range strings.Split(r.Shards, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if seen[name] {
			return nil, badInput("--shards: %s is listed twice; give each shard once", name)
		}
		seen[name] = true
		out = append(out, Shard{Name: name})
	}
	if len(out) == 0 {
		return nil, badInput("--shards is empty: give the current shards, e.g. --shards a,b,c,d")
	}
	return out, nil
}

// change is a PlanRequest with its lists parsed.
type change struct {
	PlanRequest
	adds, removes []string
	weights       map[string]float64
	rebalance     bool
}

// plan checks the change against old (nshards: how many Shards) and plans
// it: the moves, and for a rebalance its steps one shard at a time.
func (c change) plan(old *Ring, nshards int, o Options) (moves []Move, steps [][]Move, err error) {
	adds, removes, ws := c.adds, c.removes, c.weights
	switch {
	case c.rebalance:
		for _, a := range adds {
			if old.HasShard(a) {
				return nil, nil, badInput("--add %s: the ring already has a shard %s; give a new name", a, a)
			}
		}
		for _, r := range removes {
			if !old.HasShard(r) {
				return nil, nil, badInput("--remove %s: no such shard; give one of --shards (%s)", r, strings.Join(old.Shards(), ","))
			}
		}
		if len(removes) >= nshards && len(adds) == 0 {
			return nil, nil, badInput("--remove %s: that is every shard; a ring needs at least one", c.Remove)
		}
		for name := range ws {
			if !old.HasShard(name) && !slices.Contains(adds, name) {
				return nil, nil, badInput("--weight %s: no such shard; give one of --shards (%s) or of --add", name, strings.Join(old.Shards(), ","))
			}
			if slices.Contains(removes, name) {
				return nil, nil, badInput("--weight %s: the shard is removed; drop its weight or keep it", name)
			}
		}
		rc := Change{Kind: "rebalance", Add: adds, Remove: removes, Weights: ws, Opts: o}
		_, moves, err = PlanChange(old, nil, rc)
		if err != nil {
			return nil, nil, &InputError{Err: err}
		}
		if steps, err = PlanSteps(old, rc.Target(), o); err != nil {
			return nil, nil, &InputError{Err: err}
		}
	case c.Split != "":
		if !old.HasShard(c.Split) {
			return nil, nil, badInput("--split %s: no such shard; give one of --shards (%s)", c.Split, strings.Join(old.Shards(), ","))
		}
		into := c.Into
		if into == "" {
			into = c.Split + "-2"
		}
		if old.HasShard(into) {
			return nil, nil, badInput("--into %s: the ring already has a shard %s; give a new name", into, into)
		}
		_, moves, err = PlanSplit(old, c.Split, Shard{Name: into}, o)
	default:
		rg, perr := ParseRange(c.Move)
		if perr != nil {
			return nil, nil, badInput("--move: %w", perr)
		}
		if c.To == "" {
			return nil, nil, badInput("--move needs --to: the shard receiving the range")
		}
		_, moves, err = PlanMove(old, rg, c.To)
	}
	if err != nil {
		return nil, nil, err
	}
	if moves == nil {
		moves = []Move{}
	}
	return moves, steps, nil
}

// ParseNames reads a comma-separated list of shard names given as flag;
// each once.
func ParseNames(flag, v string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if slices.Contains(out, name) {
			return nil, badInput("%s: %s is listed twice; give each shard once", flag, name)
		}
		out = append(out, name)
	}
	return out, nil
}

// ParseWeights reads --weight name=w values (each repeated, or
// comma-separated).
func ParseWeights(flags []string) (map[string]float64, error) {
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
				return nil, badInput("--weight %q: want shard=weight with a positive weight, e.g. --weight a=2", kv)
			}
			if _, dup := out[name]; dup {
				return nil, badInput("--weight: %s is given twice; give each shard's weight once", name)
			}
			out[name] = w
		}
	}
	return out, nil
}

// SimRequest is ring simulate's request: Algo is "all" or a comma-separated
// list of Algorithms.
type SimRequest struct {
	Shards, Add, VNodes, Keys int
	Algo                      string
}

// Options checks r: the simulation's options.
func (r SimRequest) Options() (SimOptions, error) {
	switch {
	case r.Shards < 1:
		return SimOptions{}, badInput("--shards %d: give 1 or more shards", r.Shards)
	case r.Add < 1:
		return SimOptions{}, badInput("--add %d: give 1 or more shards to add", r.Add)
	case r.VNodes < 1:
		return SimOptions{}, badInput("--vnodes %d: give 1 or more vnodes per shard", r.VNodes)
	case r.Keys < 1:
		return SimOptions{}, badInput("--keys %d: give 1 or more sample keys", r.Keys)
	}
	var algos []string
	for _, a := range strings.Split(r.Algo, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if a != "all" && !slices.Contains(Algorithms, a) {
				return SimOptions{}, badInput("--algo %s: want all or a comma-separated list of %s", a, strings.Join(Algorithms, ", "))
			}
			algos = append(algos, a)
		}
	}
	return SimOptions{Shards: r.Shards, Add: r.Add, VNodes: r.VNodes, Keys: r.Keys, Algos: algos}, nil
}

// EachToken calls fn with each key and its token: the keys given, else
// each line of in (without its line ending; a final line without a newline
// counts, a trailing newline does not add an empty key). keyType is the
// --type of ring token.
func EachToken(keyType string, keys []string, in io.Reader, fn func(key string, token int64) error) error {
	if keyType == "" {
		return badInput("--type is required: text, bigint or uuid")
	}
	kt, err := ParseKeyType(keyType)
	if err != nil {
		return badInput("--type %q: want text, bigint or uuid", keyType)
	}
	emit := func(key string) error {
		tok, err := TokenOf(kt, key)
		if err != nil {
			return badInput("%w; give keys in PostgreSQL's text form for --type %s", err, keyType)
		}
		return fn(key, tok)
	}
	if len(keys) > 0 {
		for _, k := range keys {
			if err := emit(k); err != nil {
				return err
			}
		}
		return nil
	}
	return eachLine(in, emit)
}

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
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read keys from stdin: %w", err)
		}
	}
}
