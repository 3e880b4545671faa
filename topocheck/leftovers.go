package topocheck

import (
	"context"
	"fmt"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/topology"
)

// Liveness says whether a workflow of migration id runs (its Migration
// workflow or one of its moves'), and when none does how the migration's
// ended ("terminated in CUTOVER", "not found: its history is lost"); err
// when the orchestrator cannot tell. The CLI asks Temporal.
type Liveness func(ctx context.Context, id string) (runs bool, ended string, err error)

// EndedMigration is a migration whose workflow has ended with moves not
// ended: its ranges stay migrating and its streams, copies and guards stay
// until reshard recover.
type EndedMigration struct {
	Migration string `json:"migration"`
	// Workflow is how its workflow ended: terminated, failed, not found ...
	Workflow string `json:"workflow"`
	Moves    int    `json:"moves_not_ended"`
	// Migrating is the number of ranges the current topology has migrating.
	Migrating int    `json:"ranges_migrating"`
	Fix       string `json:"fix"`
}

// Leftover is a slot, publication or origin of a move's stream that no
// live move uses.
type Leftover struct {
	Shard string `json:"shard"`
	cdc.Object
	Move      string `json:"move,omitempty"`
	Migration string `json:"migration,omitempty"`
	Fix       string `json:"fix"`
}

// EndedMigrations are the migrations of the keyspace of ks with moves not
// ended whose workflow has ended; migrations live cannot tell about are
// noted in unknown. Errors are the control database's.
func EndedMigrations(ctx context.Context, ks *topology.Store, live Liveness) (ended []EndedMigration, unknown []string, err error) {
	running, err := ks.RunningMoves(ctx)
	if err != nil {
		return nil, nil, err
	}
	cur, err := ks.Current(ctx)
	if err != nil {
		return nil, nil, err
	}
	n := map[string]int{}
	var ids []string
	for _, m := range running {
		if n[m.MigrationID] == 0 {
			ids = append(ids, m.MigrationID)
		}
		n[m.MigrationID]++
	}
	for _, id := range ids {
		runs, how, err := live(ctx, id)
		switch {
		case err != nil:
			unknown = append(unknown, fmt.Sprintf("migration %s has %d move(s) not ended; Temporal cannot say whether its workflow runs (%v)", id, n[id], err))
		case !runs:
			e := EndedMigration{Migration: id, Workflow: how, Moves: n[id], Fix: "reshard recover " + id}
			if cur.MigrationID == id {
				e.Migrating = len(cur.Migrating())
			}
			ended = append(ended, e)
		}
	}
	return ended, unknown, nil
}

// Objects lists one shard's stream objects (cdc.Objects on its pool).
type Objects func(ctx context.Context, shard string) ([]cdc.Object, error)

// Leftovers lists, on each of shards (in their order), the slots,
// publications and origins of moves that no live move uses: moves of a
// migration whose workflows have ended (recover drops them), or of no
// stored plan. A migration live cannot tell about is given the benefit of
// the doubt. They come by the keyspace of their migration ("" for a move
// no plan names). A shard that cannot be read is noted, not an error: it
// may be down or not set up yet, and the keyspace checks say what they
// need. The error is the control database's.
func Leftovers(ctx context.Context, store *topology.Store, shards []string, objects Objects, live Liveness) (map[string][]Leftover, []string, error) {
	index, err := store.MoveIndex(ctx)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	keyspaceOf := map[string]string{}
	out := map[string][]Leftover{} // by keyspace
	for _, shard := range shards {
		objs, err := objects(ctx, shard)
		if err != nil {
			notes = append(notes, fmt.Sprintf("shard %s: cannot list its slots, publications and origins: %v", shard, err))
			continue
		}
		for _, o := range objs {
			lo := Leftover{Shard: shard, Object: o}
			move, _, ok := cdc.MoveOf(o.Name, func(m string) bool { _, known := index[m]; return known })
			if !ok {
				lo.Fix = fmt.Sprintf("no stored plan names its move: drop it on %s if nothing uses it (%s)", shard, o.DropSQL())
				out[""] = append(out[""], lo)
				continue
			}
			lo.Move, lo.Migration = move, index[move]
			if runs, _, err := live(ctx, lo.Migration); runs || err != nil {
				continue
			}
			ks, seen := keyspaceOf[lo.Migration]
			if !seen {
				if start, err := store.FindMigration(ctx, lo.Migration); err == nil {
					ks = start.Keyspace
				}
				keyspaceOf[lo.Migration] = ks
			}
			lo.Fix = "reshard recover " + lo.Migration
			out[ks] = append(out[ks], lo)
		}
	}
	return out, notes, nil
}
