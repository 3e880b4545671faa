package plan

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Shards gives the pool of a shard by name (the CLI's configuration, the
// worker's resolver).
type Shards func(ctx context.Context, shard string) (*pgxpool.Pool, error)

// Throttle is a move's copy throttle, for the ETA (0: unlimited).
type Throttle struct{ RowsPerSec, BytesPerSec float64 }

// MoveReport is the preflight of one move.
type MoveReport struct {
	Move topology.PlannedMove
	tableset.Report
	ETA time.Duration
}

// Report is the preflight of a plan's moves.
type Report struct {
	Moves    []MoveReport
	Rows     int64
	Bytes    int64
	ETA      time.Duration // the slowest move's: moves copy in parallel, each throttled on its own
	Problems int
}

// Preflight runs the PLAN checks (tableset.Preflight) of every move of
// moves, in their order, and the estimates: every check a migration's
// servers get before anything changes runs here, for the CLI and the
// worker alike. It changes nothing. Each server must have a replication
// slot and a WAL sender free for every move it takes part in (the forward
// stream's on the source, GRACE's reverse stream's on the target). The
// problems are in the report; the error is a server that could not be
// asked.
func Preflight(ctx context.Context, shards Shards, spec tableset.Spec, moves []topology.PlannedMove, th Throttle) (Report, error) {
	slots := map[string]int{}
	for _, m := range moves {
		slots[m.From]++
		slots[m.To]++
	}
	var rep Report
	for _, m := range moves {
		src, err := shards(ctx, m.From)
		if err != nil {
			return Report{}, err
		}
		dst, err := shards(ctx, m.To)
		if err != nil {
			return Report{}, err
		}
		need := max(slots[m.From], slots[m.To])
		pf, err := tableset.Preflight(ctx, src, dst, spec, tableset.PreflightOptions{
			SourceName: m.From, TargetName: m.To, TargetShard: m.To, Ranges: m.Ranges,
			Slots: need, WalSenders: need, CatchUpSlots: cdc.CatchUpSlots,
		})
		if err != nil && len(pf.Problems) == 0 {
			return Report{}, fmt.Errorf("preflight %s → %s: %w", m.From, m.To, err)
		}
		mr := MoveReport{Move: m, Report: pf, ETA: pf.ETA(th.RowsPerSec, th.BytesPerSec)}
		rep.Moves = append(rep.Moves, mr)
		rep.Rows += pf.Rows()
		rep.Bytes += pf.Bytes()
		rep.ETA = max(rep.ETA, mr.ETA)
		rep.Problems += len(pf.Problems)
	}
	return rep, nil
}
