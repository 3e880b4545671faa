package cutover

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/cdc"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
)

// Move is one move as the phases after the copy see it: its ranges, its two
// shards by name (in the topology) and by pool (the orchestrator's sessions:
// a role with the privileges of docs/operations.md, "Privileges" — it sets
// session_replication_role, drops slots, publishes the tables).
type Move struct {
	// ID names the slot, publication, origin, checkpoints and journal.
	ID       string
	From, To string
	Source   *pgxpool.Pool // From
	Target   *pgxpool.Pool // To
	Set      tableset.Set
	Ranges   []ring.Range
}

// Reversed is the same move seen from the other end (the GRACE reverse
// stream, the rollback's reverse cutover): Source is the new owner.
func (m Move) Reversed() Move {
	return Move{ID: m.ID, From: m.To, To: m.From, Source: m.Target, Target: m.Source, Set: m.Set, Ranges: m.Ranges}
}

// Check refuses a move that lacks what every phase after the copy needs.
func (m Move) Check() error {
	if m.ID == "" || m.From == "" || m.To == "" || m.Source == nil || m.Target == nil || len(m.Set.Tables) == 0 || len(ring.Normalize(m.Ranges)) == 0 {
		return fmt.Errorf("move %q: id, both shard names and pools, the table set and the ranges are required", m.ID)
	}
	return nil
}

// NewPG returns the real Actions of a cutover of m: fences on m's shards, the
// drain of the running stream s (the forward stream for a cutover, the
// reverse stream for a rollback's reverse cutover — then pass m.Reversed()),
// and the handover h published in fences' store, by the attempt of journal
// j (its Claim: an older attempt publishes nothing); fences are derived from
// the control database by fence.Reconcile. With s nil the actions can settle
// an earlier attempt (Resume) but not drain.
func NewPG(m Move, s cdc.Controller, fences fence.Control, h topology.Handover, j PGJournal) *PG {
	store := fences.Store
	guard := j.Guard()
	p := &PG{
		Source: m.Source, Target: m.Target, From: m.From, To: m.To, Set: m.Set, Ranges: m.Ranges, Move: m.ID, Fences: fences, Epoch: j.Epoch,
		PublishFunc:   func(ctx context.Context) (int64, error) { return h.PublishGuarded(ctx, store, guard) },
		PublishedFunc: func(ctx context.Context) (bool, error) { return h.Published(ctx, store) },
	}
	if s != nil {
		p.DrainFunc = func(ctx context.Context, marker string, _ time.Duration) error {
			_, err := s.DrainToMarker(ctx, marker)
			return err
		}
	}
	return p
}
