package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/reshard/reshard/topology"
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
type repairedMove = verify.RepairedMove

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
	chosen, refusals := st.Repairable(move)
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
	// The repair drops the move's reverse slot (verify.RepairMove): only
	// while no cutover of the move has published, which the topology says
	// whatever the workflow's state a moment ago said.
	store, pool, err := cfg.openStore(ctx)
	if err != nil {
		return res, err
	}
	cur, err := store.In(req.Keyspace).Current(ctx)
	pool.Close()
	if err != nil {
		return res, fmt.Errorf("read the current topology: %w", err)
	}
	if topology.Owns(cur.Ring, spec.Target, spec.Ranges) {
		return res, rejectedError{reason: fmt.Sprintf("move %s: topology v%d gives its ranges to %s: the move cut over, its target is the owner and is not repaired", spec.ID, cur.Version, spec.Target)}
	}
	chunkRows := o.chunkRows
	if chunkRows <= 0 {
		chunkRows = req.WithDefaults().VerifyChunkRows
	}
	res.Report, err = verify.RepairMove(ctx, src, dst, verify.Move{ID: spec.ID, Source: spec.Source, Target: spec.Target}, req.Tables, verify.Options{
		Ranges: spec.Ranges, ChunkRows: chunkRows, Parallel: o.parallel, BisectRows: o.bisectRows,
		RowsPerSecond: o.rowsPerSec, Logger: o.logger,
	})
	var bad *verify.BadMoveIDError
	var reads *verify.StreamReadsError
	switch {
	case errors.As(err, &bad):
		return res, usageError{err}
	case errors.As(err, &reads):
		return res, rejectedError{reason: reads.Error()}
	case err != nil:
		return res, err
	}
	return res, nil
}

var errRepairArgs = errors.New("--repair takes a migration or move id and no --source-dsn, --target-dsn, --table, --range or --run-id")
