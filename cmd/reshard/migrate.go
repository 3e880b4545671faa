package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/plan"
	"github.com/reshard/reshard/planview"
	"github.com/reshard/reshard/request"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// migrationFlags are the flags of split, add-node, remove-node, move,
// rebalance and their plan (dry-run) forms: the request's options
// (request.Options) and the command's own.
type migrationFlags struct {
	request.Options
	keyspace  string
	walWindow time.Duration // the capacity probe's WAL window
	asJSON    bool
}

func (f *migrationFlags) register(cmd *cobra.Command, kind workflows.Kind, dryRun bool) {
	fl := cmd.Flags()
	fl.StringArrayVar(&f.Tables, "table", nil, "[schema.]table:key (repeatable): leave out to move the keyspace's tables; when given, must name every one of them")
	fl.StringVar(&f.TableSet, "table-set", "", "deprecated, ignored: the keyspace names the tables")
	fl.StringVar(&f.keyspace, "keyspace", "", "the keyspace whose ring changes (default: the cluster's only keyspace)")
	fl.IntVar(&f.VNodes, "vnodes", workflows.DefaultVNodes, "vnodes of the new shard")
	fl.StringVar(&f.Tokens, "tokens", workflows.DefaultTokens, "token allocation of new vnodes: balanced or hash")
	fl.Float64Var(&f.RowsPerSec, "rows-per-sec", 0, "copy throttle per move, rows per second (0: unlimited)")
	fl.Float64Var(&f.BytesPerSec, "bytes-per-sec", 0, "copy throttle per move, bytes per second (0: unlimited)")
	fl.IntVar(&f.ChunkRows, "copy-chunk-rows", workflows.DefaultCopyChunkRows, "rows per copy chunk (at most one second of the throttle)")
	fl.IntVar(&f.ChunkRows, "chunk-rows", workflows.DefaultCopyChunkRows, "rows per copy chunk")
	_ = fl.MarkDeprecated("chunk-rows", "use --copy-chunk-rows")
	fl.IntVar(&f.VerifyChunkRows, "verify-chunk-rows", workflows.DefaultVerifyChunkRows, "moving rows per verify chunk")
	fl.IntVar(&f.MaxParallel, "max-parallel-moves", 0, "moves running at once; the others queue (0: no bound)")
	fl.IntVar(&f.MaxPerShard, "max-moves-per-shard", 0, "moves a shard takes part in at once, as source or target (0: no bound)")
	fl.BoolVar(&f.RequireApproval, "require-approval", false, "wait for reshard approve before each cutover")
	fl.StringVar(&f.ReadFrom, "read-from", string(workflows.ReadFromPrimary), "where the copy and verify read the source's rows: primary, or standby (each source shard's standby: in reshard.yaml; the slot stays on the primary)")
	fl.Var(optionalBool{&f.StreamDuringCopy}, "stream-during-copy", "start each move's stream with its copy, behind the copy gate, so that the source's slot retains about the stream's lag of WAL instead of the whole copy's (integer and uuid primary keys only; not with --read-from standby). Default: on where the keyspace allows it, else after the copy (the plan says why); =false: after the copy; given: refused where not allowed")
	fl.Lookup("stream-during-copy").NoOptDefVal = "true"
	fl.StringVar(&f.OnVerifyFail, "on-verify-fail", string(workflows.VerifyFailWait), "after a failed verify: wait (for reshard rollback or reverify) or rollback")
	fl.DurationVar(&f.Grace, "grace", workflows.DefaultGracePeriod, "GRACE period after cutover: reverse replication keeps the old owner current for a rollback (0: clean up right after cutover, no rollback)")
	fl.DurationVar(&f.CutoverBudget, "cutover-budget", workflows.DefaultCutoverBudget, "write-pause budget of a cutover; over it the cutover aborts and retries")
	fl.Int64Var(&f.MaxLagBytes, "max-lag-bytes", workflows.DefaultMaxLagBytes, "CDC catch-up gate: a move verifies (and then cuts over) once its CDC lag is at most this many bytes")
	registerAdaptive(fl, &f.Adaptive)
	fl.DurationVar(&f.walWindow, "wal-window", capacity.DefaultWALWindow, "how long the capacity probe watches each shard's WAL rate before predicting the WAL a move's slot retains")
	if !dryRun {
		fl.StringVar(&f.ID, "id", "", "migration id: lower-case letters, digits, '-' (default: generated)")
	}
	switch kind {
	case workflows.KindSplit:
		fl.StringVar(&f.Into, "into", "", "the new shard that takes half of the split shard's ranges (required)")
	case workflows.KindMove:
		fl.StringVar(&f.Range, "range", "", "token range to move, lo:hi or (lo,hi] as status and ring show print it (lo exclusive, hi inclusive; required)")
		fl.StringVar(&f.To, "to", "", "shard receiving the range (required)")
	case workflows.KindRebalance:
		fl.StringVar(&f.Add, "add", "", "shards to add, comma-separated (each in the configuration)")
		fl.StringVar(&f.Remove, "remove", "", "shards to remove, comma-separated")
		fl.StringArrayVar(&f.Weights, "weight", nil, "shard=weight (repeatable or comma-separated): the weight of a shard that stays or is added")
	}
	fl.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
}

// optionalBool is a boolean flag that tells unset (nil: the default)
// from false: --flag and --flag=true set true, --flag=false false.
type optionalBool struct{ p **bool }

func (b optionalBool) String() string {
	if b.p == nil || *b.p == nil {
		return "auto"
	}
	return strconv.FormatBool(**b.p)
}

func (b optionalBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false (leave the flag out for the default), not %q", s)
	}
	*b.p = &v
	return nil
}

func (b optionalBool) Type() string { return "bool" }

// idPattern is a migration id (request.IDPattern).
var idPattern = request.IDPattern

// buildRequest turns the arguments and flags into a MigrationRequest
// (request.Build); every error is bad input.
func buildRequest(kind workflows.Kind, args []string, f migrationFlags) (workflows.MigrationRequest, error) {
	return request.Build(kind, args, f.Options)
}

// parseTableSpec reads --table [schema.]table:key flags (request.Tables).
var parseTableSpec = request.Tables

// movePair is one Move workflow's ranges (planview.Pair); migrationPlan
// the plan of a request and its pairs (planview.Plan).
type (
	movePair      = planview.Pair
	migrationPlan = planview.Plan
)

// planMigration checks the request against the configuration and computes
// its plan on topology t with the registry's weights reg, as the worker's
// PLAN does (plan.Compute). Errors are bad input naming the fix.
func planMigration(cfg *clusterConfig, t topology.Topology, reg []ring.Shard, req workflows.MigrationRequest) (*migrationPlan, error) {
	c, err := req.Change()
	if err != nil {
		return nil, usageError{err}
	}
	pl, err := plan.Compute(t, reg, plan.Request{Migration: req.ID, Change: c})
	if err != nil {
		var in *plan.InputError
		if errors.As(err, &in) {
			return nil, usageError{err}
		}
		return nil, err
	}
	flag, named := request.NewShards(req)
	for _, name := range named {
		if _, ok := cfg.Shards[name]; !ok {
			return nil, usageError{fmt.Errorf("%s %s is not in the configuration %s (shards: %s): add it there first (locally: %s)",
				flag, name, cfg.Path, strings.Join(cfg.ShardNames(), ", "), devenv.UpHint(name, len(cfg.Shards)))}
		}
	}
	return planview.New(req, pl), nil
}

// planRequest plans req on the current topology of its keyspace (keyspace,
// or the cluster's only one: migrationKeyspace, which also gives req its
// tables and says whether the cluster's keyspaces are yet to register),
// returning the plan and the store scoped to the keyspace.
func planRequest(ctx context.Context, cfg *clusterConfig, store *topology.Store, keyspace string, req workflows.MigrationRequest) (*migrationPlan, *topology.Store, bool, error) {
	var register bool
	var err error
	if req.Keyspace, req.Tables, register, err = migrationKeyspace(ctx, store, keyspace, req.Tables); err != nil {
		return nil, nil, false, err
	}
	store = store.In(req.Keyspace)
	t, err := store.Current(ctx)
	if errors.Is(err, topology.ErrNoTopology) {
		return nil, nil, false, usageError{fmt.Errorf("keyspace %s has no topology yet: run reshard init --keyspace %s first", req.Keyspace, req.Keyspace)}
	}
	if err != nil {
		return nil, nil, false, controlErr(err)
	}
	reg, err := plan.Registry(ctx, store)
	if err != nil {
		return nil, nil, false, controlErr(err)
	}
	p, err := planMigration(cfg, t, reg, req)
	return p, store, register, err
}

// newMigrationCmd is split, add-node, remove-node or move; with dryRun, the
// same verb under reshard plan.
func newMigrationCmd(opts *globalOptions, kind workflows.Kind, dryRun bool) *cobra.Command {
	var (
		f  migrationFlags
		cf configFlags
	)
	use := map[workflows.Kind]string{
		workflows.KindAddNode:    "add-node <shard> --table t:key...",
		workflows.KindSplit:      "split <shard> --into <new shard> --table t:key...",
		workflows.KindRemoveNode: "remove-node <shard> --table t:key...",
		workflows.KindMove:       "move --range lo:hi --to <shard> --table t:key...",
		workflows.KindRebalance:  "rebalance [--add e,f] [--remove a] [--weight b=2] --table t:key...",
	}[kind]
	short := map[workflows.Kind]string{
		workflows.KindAddNode:    "Add a configured shard to the ring: it takes about 1/(N+1) of the token space from every shard",
		workflows.KindSplit:      "Split a shard: a new shard takes half of its token ranges",
		workflows.KindRemoveNode: "Remove a shard: its ranges go to the others",
		workflows.KindMove:       "Move one token range to a shard",
		workflows.KindRebalance:  "Add, remove and reweigh shards in one plan: the least movement, no range moved twice",
	}[kind]
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := buildRequest(kind, args, f)
			if err != nil {
				return usageError{err}
			}
			if dryRun {
				req.ID = "" // a plan starts nothing, so it names nothing
			}
			cfg, err := cf.load(opts)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			store, pool, err := cfg.openStore(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			p, store, register, err := planRequest(ctx, cfg, store, f.keyspace, req)
			if err != nil {
				return err
			}
			if dryRun {
				return runPlan(ctx, cmd, args, cfg, p, f.asJSON, f.walWindow)
			}
			// The PLAN checks before anything starts: bad input is refused
			// here with its fix, with no workflow left behind.
			rep, err := preflightPlan(ctx, cfg, p, f.walWindow)
			if err != nil {
				return err
			}
			if probs := planview.ProblemLines(rep); len(probs) > 0 {
				return usageError{fmt.Errorf("%d preflight problem(s); fix these (reshard plan %s shows the whole plan), nothing was started:\n%s",
					rep.Problems, p.Request.Kind, strings.Join(probs, "\n"))}
			}
			if err := checkWorkersKnow(ctx, store, p); err != nil {
				return err
			}
			if register { // a cluster from before keyspaces: its first migration registers them
				if err := topology.Migrate(ctx, pool); err != nil {
					return controlErr(err)
				}
				if _, err := registerKeyspace(ctx, cfg, controlDB(store, pool), p.Request.Tables.Name, p.Request.Tables); err != nil {
					return err
				}
			}
			return startMigration(ctx, cmd, opts, cfg, p, f.asJSON)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f.register(cmd, kind, dryRun)
	cf.register(cmd)
	if !dryRun {
		cmd.Long = short + `.

Checks the request against the configuration and the current topology, then
starts the Migration workflow (task queue "reshard"; a reshard worker runs it)
and prints its id and Temporal UI link. Nothing is changed by this command
itself: the workflow walks every move through PLAN → JOINING → SNAPSHOT_COPY →
CDC_CATCH_UP → VERIFY → CUTOVER → GRACE → CLEANUP. Use reshard plan ` + string(kind) + `
first for a dry run with preflight checks and estimates.

A migration is refused while another one runs, and an --id is never reused.
With no reshard worker polling the task queue it starts all the same, with a
warning on stderr: it waits and begins when a worker runs.
Exit codes: 0 started, 1 failure, 2 bad input or refused (nothing started).`
	}
	return cmd
}

// checkWorkersKnow refuses a migration whose shards no running worker's
// configuration names (control.WorkersKnow): bad input, nothing started.
// With no worker reporting (none runs: startMigration warns), it passes.
func checkWorkersKnow(ctx context.Context, store *topology.Store, p *migrationPlan) error {
	var want []string
	for _, pr := range p.Pairs {
		want = append(want, pr.Source, pr.Target)
	}
	if err := control.WorkersKnow(ctx, store, want, configPoll); err != nil {
		return usageError{err}
	}
	return nil
}

// startMigration starts the workflow of a checked plan.
func startMigration(ctx context.Context, cmd *cobra.Command, opts *globalOptions, cfg *clusterConfig, p *migrationPlan, asJSON bool) error {
	tc, err := cfg.dialTemporal(ctx, opts)
	if err != nil {
		return err
	}
	defer tc.Close()
	running, err := control.Running(ctx, tc)
	if err != nil {
		return err
	}
	if len(running) > 0 {
		return usageError{fmt.Errorf("migration %s is running (workflow %s): one migration at a time; wait for it (reshard status %s) or roll it back; nothing was started",
			migrationIDOf(running[0]), running[0], migrationIDOf(running[0]))}
	}
	// A migration started with no worker waits, and begins whenever one
	// starts: say so now rather than leave "started" unexplained.
	if polls, err := workerRuns(ctx, tc, cfg); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v; the migration starts only once a worker runs it\n", err)
	} else if !polls {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s; the migration waits and begins only when one runs\n", noWorker(cfg))
	}
	req := p.Request
	if req.Cluster, err = clusterID(ctx, cfg); err != nil {
		return err
	}
	wfID := workflows.MigrationWorkflowID(req.ID)
	runID, err := control.Start(ctx, tc, req, p.Summary(), p.Details())
	if errors.Is(err, control.ErrTaken) {
		return usageError{fmt.Errorf("migration id %s is taken (workflow %s exists; ids are never reused): pick another --id or omit it; nothing was started", req.ID, wfID)}
	}
	if err != nil {
		return err
	}
	return planview.Started{Plan: p, RunID: runID, UI: cfg.uiLink(wfID, runID)}.Write(cmd.OutOrStdout(), asJSON)
}

// clusterID is the id of the configuration's cluster (its control
// database's, made by the schema's migration): the migration carries it,
// and a worker of another cluster on the same task queue refuses its
// activities.
func clusterID(ctx context.Context, cfg *clusterConfig) (string, error) {
	store, closeStore, err := cfg.smallControl(ctx, 1)
	if err != nil {
		return "", err
	}
	defer closeStore()
	id, err := store.EnsureClusterID(ctx)
	return id, controlErr(err)
}

// migrationIDArg is the migration id of an argument that is either a
// migration id or its workflow id (control.IDOf).
var migrationIDArg = control.IDOf

// migrationIDOf strips the workflow id prefix of MigrationWorkflowID.
var migrationIDOf = control.IDOf
