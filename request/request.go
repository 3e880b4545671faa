package request

import (
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/keyspace"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/workflows"
)

// Options are a migration's settings as the operator gives them, by flag.
type Options struct {
	Tables          []string // --table [schema.]table:key
	TableSet        string   // --table-set (deprecated: names the spec only)
	VNodes          int
	Tokens          string
	RowsPerSec      float64
	BytesPerSec     float64
	ChunkRows       int // --copy-chunk-rows
	VerifyChunkRows int
	MaxParallel     int // moves at once (0: no bound)
	MaxPerShard     int // moves a shard takes part in at once (0: no bound)
	RequireApproval bool
	OnVerifyFail    string
	ReadFrom        string
	// StreamDuringCopy: --stream-during-copy, true or false; nil (not
	// given) is the default, on where the keyspace allows it
	// (MigrationRequest.StreamAuto).
	StreamDuringCopy *bool
	Grace            time.Duration
	CutoverBudget    time.Duration
	MaxLagBytes      int64
	Adaptive         workflows.AdaptiveThrottle // all 0: off
	ID               string
	Into             string   // split
	Range            string   // move
	To               string   // move
	Add, Remove      string   // rebalance: comma-separated shards
	Weights          []string // rebalance: shard=weight
}

// Build turns the arguments and options of a migration verb into a
// MigrationRequest. It checks only what needs no database; every error is
// bad input. An empty ID is generated (NewID).
func Build(kind workflows.Kind, args []string, o Options) (workflows.MigrationRequest, error) {
	req := workflows.MigrationRequest{Kind: kind, ID: o.ID}
	if err := shards(&req, args, o); err != nil {
		return req, err
	}
	if len(o.Tables) > 0 { // else the keyspace's tables
		spec, err := Tables(o.Tables, o.TableSet)
		if err != nil {
			return req, err
		}
		req.Tables = spec
	}
	// Zero is no value for these flags (in a request it means the default).
	for _, z := range []struct {
		flag string
		v    int
	}{{"--vnodes", o.VNodes}, {"--copy-chunk-rows", o.ChunkRows}, {"--verify-chunk-rows", o.VerifyChunkRows}} {
		if z.v < 1 {
			return req, fmt.Errorf("%s %d: want 1 or more", z.flag, z.v)
		}
	}
	alloc, err := ring.ParseAllocation(o.Tokens)
	if err != nil {
		return req, fmt.Errorf("--tokens: %w", err)
	}
	req.VNodes, req.Tokens = o.VNodes, string(alloc)
	req.Throttle = workflows.Throttle{RowsPerSec: o.RowsPerSec, BytesPerSec: o.BytesPerSec, Adaptive: Adaptive(o.Adaptive)}
	req.ChunkRows, req.VerifyChunkRows = o.ChunkRows, o.VerifyChunkRows
	req.MaxParallelMoves, req.MaxMovesPerShard = o.MaxParallel, o.MaxPerShard
	req.RequireApproval = o.RequireApproval
	req.OnVerifyFail = workflows.OnVerifyFail(o.OnVerifyFail)
	req.ReadFrom = workflows.ReadFrom(o.ReadFrom)
	switch {
	case o.StreamDuringCopy != nil: // given: on is refused where not allowed
		req.StreamDuringCopy = *o.StreamDuringCopy
	case req.ReadFrom == workflows.ReadFromStandby:
		req.StreamAuto, req.StreamAfterCopy = true, StreamAfterStandby
	default: // on, until PLAN's checks find a table the copy gate cannot order
		req.StreamAuto, req.StreamDuringCopy = true, true
	}
	req.GracePeriod = new(o.Grace)
	req.CutoverBudget = o.CutoverBudget
	if o.CutoverBudget == 0 {
		return req, errors.New("--cutover-budget 0s: want 100ms or more")
	}
	req.MaxLagBytes = o.MaxLagBytes
	// The one validation of a migration's settings (the workflow's too).
	if err := req.Validate(); err != nil {
		return req, err
	}
	if req.ID == "" {
		req.ID = NewID(kind)
	} else if !IDPattern.MatchString(req.ID) {
		return req, fmt.Errorf("--id %q: want lower-case letters, digits and '-', starting with a letter or digit, at most 40", req.ID)
	} else if strings.HasPrefix(req.ID, workflows.MigrationWorkflowID("")) {
		return req, fmt.Errorf("--id %q: an id may not start with %q, the prefix of workflow ids (commands take either form): drop it", req.ID, workflows.MigrationWorkflowID(""))
	}
	return req, nil
}

// StreamAfterStandby is why a request that reads from the standby streams
// after the copy by default: the copy gate needs the chunks read on the
// primary.
const StreamAfterStandby = "the copy reads from the standby (--read-from standby)"

// shards reads the shards a verb names: its argument, --into, --range and
// --to, or a rebalance's --add, --remove and --weight.
func shards(req *workflows.MigrationRequest, args []string, o Options) error {
	switch req.Kind {
	case workflows.KindAddNode, workflows.KindSplit, workflows.KindRemoveNode:
		if len(args) != 1 {
			return fmt.Errorf("%s takes one shard name, e.g. reshard %s shard5", req.Kind, req.Kind)
		}
		req.Shard = args[0]
		if !devenv.ValidShardName(req.Shard) {
			return fmt.Errorf("shard name %q: use letters, digits, '-' and '_' (at most 63)", req.Shard)
		}
	case workflows.KindMove:
		if len(args) != 0 {
			return errors.New("move takes no arguments: reshard move --range lo:hi --to shard")
		}
	case workflows.KindRebalance:
		if len(args) != 0 {
			return errors.New("rebalance takes no arguments: name the shards with --add, --remove and --weight shard=w")
		}
		return rebalance(req, o)
	}
	switch req.Kind {
	case workflows.KindSplit:
		if o.Into == "" {
			return fmt.Errorf("split %s needs --into <new shard>: the shard that takes half of %s's ranges", req.Shard, req.Shard)
		}
		if o.Into == req.Shard {
			return fmt.Errorf("--into %s: a shard cannot be split into itself; name the new shard", o.Into)
		}
		if !devenv.ValidShardName(o.Into) {
			return fmt.Errorf("--into %q: use letters, digits, '-' and '_' (at most 63)", o.Into)
		}
		req.Into = o.Into
	case workflows.KindMove:
		if o.Range == "" || o.To == "" {
			return errors.New("move needs --range lo:hi and --to <shard>")
		}
		r, err := ring.ParseRange(o.Range)
		if err != nil {
			return fmt.Errorf("--range: %w", err)
		}
		if !devenv.ValidShardName(o.To) {
			return fmt.Errorf("--to %q: use letters, digits, '-' and '_' (at most 63)", o.To)
		}
		req.Range, req.To = &r, o.To
	}
	return nil
}

// rebalance reads a rebalance's wanted end state.
func rebalance(req *workflows.MigrationRequest, o Options) error {
	var err error
	if req.Add, err = ring.ParseNames("--add", o.Add); err != nil {
		return err
	}
	if req.Remove, err = ring.ParseNames("--remove", o.Remove); err != nil {
		return err
	}
	if req.Weights, err = ring.ParseWeights(o.Weights); err != nil {
		return err
	}
	if len(req.Weights) == 0 {
		req.Weights = nil
	}
	if len(req.Add)+len(req.Remove)+len(req.Weights) == 0 {
		return errors.New("rebalance needs --add shards, --remove shards or --weight shard=w (any of them together)")
	}
	for _, name := range slices.Concat(req.Add, req.Remove) {
		if !devenv.ValidShardName(name) {
			return fmt.Errorf("shard name %q: use letters, digits, '-' and '_' (at most 63)", name)
		}
	}
	return nil
}

// Tables reads --table [schema.]table:key flags; name names the spec
// (default: the first table).
func Tables(tables []string, name string) (keyspace.Spec, error) {
	var spec keyspace.Spec
	if len(tables) == 0 {
		return spec, errors.New("name the tables that move together: --table users:id --table orders:user_id ([schema.]table:key)")
	}
	seen := map[string]bool{}
	for _, t := range tables {
		tbl, key, ok := strings.Cut(t, ":")
		if !ok || tbl == "" || key == "" || strings.Contains(key, ":") {
			return spec, fmt.Errorf("--table %q: want [schema.]table:key, e.g. --table public.orders:user_id", t)
		}
		ts := keyspace.TableSpec{Schema: "public", Table: tbl, KeyColumn: key}
		if s, n, ok := strings.Cut(tbl, "."); ok {
			if s == "" || n == "" || strings.Contains(n, ".") {
				return spec, fmt.Errorf("--table %q: want [schema.]table:key", t)
			}
			ts.Schema, ts.Table = s, n
		}
		q := ts.Schema + "." + ts.Table
		if seen[q] {
			return spec, fmt.Errorf("--table %s is given twice", q)
		}
		seen[q] = true
		spec.Tables = append(spec.Tables, ts)
	}
	spec.Name = name
	if spec.Name == "" {
		spec.Name = spec.Tables[0].Table
	}
	return spec, nil
}

// IDPattern is a migration id: what NewID makes, and what --id accepts.
var IDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,39}$`)

const idAlphabet = "abcdefghijkmnpqrstuvwxyz23456789" // no 0/o, 1/l

// NewID is short, lower-case and says what it is: "add-k3f9xq".
func NewID(kind workflows.Kind) string {
	prefix := map[workflows.Kind]string{workflows.KindAddNode: "add", workflows.KindSplit: "split",
		workflows.KindRemoveNode: "remove", workflows.KindMove: "move", workflows.KindRebalance: "rebalance"}[kind]
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return prefix + "-" + string(b)
}

// Adaptive is the adaptive throttle of a, nil when no limit is set.
func Adaptive(a workflows.AdaptiveThrottle) *workflows.AdaptiveThrottle {
	if a == (workflows.AdaptiveThrottle{}) {
		return nil
	}
	return &a
}

// Throttle is what reshard throttle asks to change: the values of its
// flags and which of them were given.
type Throttle struct {
	RowsPerSec, BytesPerSec float64
	ChunkRows               int
	RowsSet, BytesSet       bool
	ChunkSet                bool
	Adaptive                workflows.AdaptiveThrottle
	AdaptiveSet             bool // any adaptive limit given
}

// ThrottleUpdate is the throttle update t asks for: the rates given (the
// others 0: unlimited), the adaptive limits given (as a whole) or none
// (kept); adaptive limits alone keep the rates.
func ThrottleUpdate(t Throttle) (workflows.Throttle, error) {
	u := workflows.Throttle{KeepRates: true}
	if t.RowsSet || t.BytesSet || t.ChunkSet || !t.AdaptiveSet {
		if !t.RowsSet && !t.BytesSet && !t.ChunkSet {
			return workflows.Throttle{}, errors.New("give --rows-per-sec, --bytes-per-sec, --copy-chunk-rows and/or adaptive limits (--max-source-latency-increase, --max-replica-lag, ...) (0: unlimited)")
		}
		if t.RowsPerSec < 0 || t.BytesPerSec < 0 || t.ChunkRows < 0 {
			return workflows.Throttle{}, errors.New("--rows-per-sec, --bytes-per-sec and --copy-chunk-rows: want 0 or more")
		}
		u = workflows.Throttle{RowsPerSec: t.RowsPerSec, BytesPerSec: t.BytesPerSec, ChunkRows: t.ChunkRows}
	}
	if t.AdaptiveSet {
		u.Adaptive = &t.Adaptive // all 0: off
		if err := u.Adaptive.Validate(); err != nil {
			return u, err
		}
	}
	return u, nil
}

// NewShards are the shards a request sends ranges to by name, and the
// argument or flag that names them: each must be in the configuration.
func NewShards(req workflows.MigrationRequest) (flag string, names []string) {
	switch req.Kind {
	case workflows.KindAddNode:
		return "add-node", []string{req.Shard}
	case workflows.KindSplit:
		return "--into", []string{req.Into}
	case workflows.KindMove:
		return "--to", []string{req.To}
	case workflows.KindRebalance:
		return "--add", req.Add
	}
	return "", nil
}
