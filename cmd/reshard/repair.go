package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/verify"
	"github.com/reshard/reshard/workflows"
)

// repairOptions are verify --repair's knobs.
type repairOptions struct {
	chunkRows, parallel, bisectRows int
	rowsPerSec                      float64
	logger                          *slog.Logger
}

// repairedMove is one move's repair, as printed.
type repairedMove struct {
	Move   string               `json:"move"`
	Source string               `json:"source"`
	Target string               `json:"target"`
	Report *verify.RepairReport `json:"report"`
}

// repairTarget resolves verify --repair's argument: a move id of a stored
// plan (its migration and that move), or a migration id (every move).
func repairTarget(ctx context.Context, cfg *clusterConfig, arg string) (migration, move string, err error) {
	store, pool, err := cfg.openStore(ctx)
	if err != nil {
		return "", "", err
	}
	defer pool.Close()
	index, err := store.MoveIndex(ctx)
	if err != nil {
		return "", "", err
	}
	if m, ok := index[arg]; ok {
		return m, arg, nil
	}
	id := migrationIDArg(arg)
	if !idPattern.MatchString(id) {
		return "", "", usageError{fmt.Errorf("%q is neither a move id of a stored plan nor a migration id: reshard status <migration> lists the moves", arg)}
	}
	return id, "", nil
}

// repairMoves repairs the target of each move of st (only move, when not
// empty) that may be repaired now (MoveState.RepairRefusal, and no stream
// reading its slot on the source). Moves that may not are refused with why
// before anything is written; with a single move named, or none of the
// migration's allowed, that is an error and nothing is changed.
func repairMoves(ctx context.Context, cfg *clusterConfig, st workflows.MigrationState, move string, o repairOptions) ([]repairedMove, error) {
	var chosen []workflows.MoveState
	var refusals []string
	for _, m := range st.Moves {
		if move != "" && m.Spec.ID != move {
			continue
		}
		if why := m.RepairRefusal(); why != "" {
			refusals = append(refusals, why)
			continue
		}
		chosen = append(chosen, m)
	}
	if move != "" && len(chosen)+len(refusals) == 0 {
		return nil, usageError{fmt.Errorf("migration %s has no move %s", st.Request.ID, move)}
	}
	if len(chosen) == 0 || (move != "" && len(refusals) > 0) {
		return nil, rejectedError{reason: fmt.Sprintf("nothing repaired: %v", refusals)}
	}
	var out []repairedMove
	for _, m := range chosen {
		r, err := repairMove(ctx, cfg, st.Request, m.Spec, o)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func repairMove(ctx context.Context, cfg *clusterConfig, req workflows.MigrationRequest, spec workflows.MoveSpec, o repairOptions) (repairedMove, error) {
	res := repairedMove{Move: spec.ID, Source: spec.Source, Target: spec.Target}
	srcDSN, ok := cfg.Shards[spec.Source]
	if !ok {
		return res, usageError{fmt.Errorf("move %s: source shard %s is not in %s", spec.ID, spec.Source, cfg.Path)}
	}
	dstDSN, ok := cfg.Shards[spec.Target]
	if !ok {
		return res, usageError{fmt.Errorf("move %s: target shard %s is not in %s", spec.ID, spec.Target, cfg.Path)}
	}
	src, err := cfg.connect(ctx, "source shard "+spec.Source, srcDSN)
	if err != nil {
		return res, err
	}
	defer src.Close()
	dst, err := cfg.connect(ctx, "target shard "+spec.Target, dstDSN)
	if err != nil {
		return res, err
	}
	defer dst.Close()
	names, err := cdc.NamesFor(spec.ID)
	if err != nil {
		return res, usageError{fmt.Errorf("move id %s: %w", spec.ID, err)}
	}
	// The workflow's state may be a moment old: the slot itself says
	// whether a stream writes the target now.
	pid, _, err := cdc.SlotReader(ctx, src, names.Slot)
	if err != nil {
		return res, fmt.Errorf("move %s on %s: %w", spec.ID, spec.Source, err)
	}
	if pid != 0 {
		return res, rejectedError{reason: fmt.Sprintf("move %s: a stream reads slot %s on %s (walsender pid %d) and writes the target: wait until reshard status shows the move stopped", spec.ID, names.Slot, spec.Source, pid)}
	}
	set, err := tableset.Introspect(ctx, src, req.Tables, "source "+spec.Source)
	if err != nil {
		return res, err
	}
	if _, err := tableset.Introspect(ctx, dst, req.Tables, "target "+spec.Target); err != nil {
		return res, err
	}
	chunkRows := o.chunkRows
	if chunkRows <= 0 {
		chunkRows = req.WithDefaults().VerifyChunkRows
	}
	res.Report, err = verify.Repair(ctx, src, dst, verify.Options{
		Set: set, Ranges: spec.Ranges, ChunkRows: chunkRows, Parallel: o.parallel, BisectRows: o.bisectRows,
		RowsPerSecond: o.rowsPerSec, Logger: o.logger,
	})
	if err != nil {
		return res, fmt.Errorf("repair move %s (%s → %s): %w", spec.ID, spec.Source, spec.Target, err)
	}
	return res, nil
}

// printRepairs prints one line per table of each repaired move.
func printRepairs(out io.Writer, rs []repairedMove) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MOVE\tSOURCE → TARGET\tTABLE\tCHUNKS\tREPAIRED\tROWS COPIED\tROWS DELETED")
	for _, r := range rs {
		for _, t := range r.Report.Tables {
			fmt.Fprintf(tw, "%s\t%s → %s\t%s\t%d\t%d\t%d\t%d\n", r.Move, r.Source, r.Target, t.Table, t.Chunks, t.Repaired, t.RowsCopied, t.RowsDeleted)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Fprintf(out, "move %s: %d of %d chunks differed and were rewritten, %d rows copied, %d deleted, in %s\n",
			r.Move, r.Report.Repaired, r.Report.Chunks, r.Report.RowsCopied, r.Report.RowsDeleted, r.Report.Duration.Round(time.Millisecond))
	}
	return nil
}

var errRepairArgs = errors.New("--repair takes a migration or move id and no --source-dsn, --target-dsn, --table, --range or --run-id")
