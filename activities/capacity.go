package activities

import (
	"encoding/json"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/workflows"
)

// SetBudgets sets what each shard can spare (reshard.yaml's capacity
// section): PLAN refuses a plan that overflows them and the copy's slot
// guard watches the WAL budget. Safe while the worker runs (a reload).
func (a *Activities) SetBudgets(b map[string]capacity.Budget) {
	a.budgets.Store(&b)
}

func (a *Activities) budgetsNow() map[string]capacity.Budget {
	if b := a.budgets.Load(); b != nil {
		return *b
	}
	return nil
}

// predicted writes each move's prediction of rep (capacity.Assess) into
// its spec.
func predicted(specs []workflows.MoveSpec, rep capacity.Report) {
	for i := range specs {
		for _, m := range rep.Moves {
			if m.ID == specs[i].ID {
				catchUp := m.CatchUp.Duration()
				if !m.Converges {
					catchUp = -1
				}
				specs[i].Predicted = &workflows.Predicted{Copy: m.Copy.Duration(), CatchUp: catchUp, Verify: m.Verify.Duration(),
					SlotWALBytes: m.SlotWAL, TargetGrowthBytes: m.TargetGrowth}
			}
		}
	}
}

// capacityJSON is the report as the plan stores it.
func capacityJSON(rep capacity.Report) []byte {
	b, _ := json.Marshal(rep) // plain data: never fails
	return b
}

// slotGuard watches a copy slice's slot (backfill.SlotGuard) against the
// source's WAL budget: the server's (max_slot_wal_keep_size) and the
// configured one. It starts at the brake the move's last slice left in this
// process.
func (a *Activities) slotGuard(spec workflows.MoveSpec, th *backfill.Throttle, source *pgxpool.Pool, slot string) *backfill.SlotGuard {
	g := &backfill.SlotGuard{Throttle: th, Source: source, Slot: slot, Shard: spec.Source, Move: spec.ID,
		Budget: a.budgetsNow()[spec.Source].WALBytes, Logger: a.log.With("move", spec.ID, "shard", spec.Source), Metrics: a.metrics.Backfill}
	if v, ok := a.guardRates.Load(spec.ID); ok {
		g.Start = v.(float64)
	}
	return g
}

// keepGuard remembers a slice's brake for the next slice of its copy, or
// forgets it when the copy is done.
func (a *Activities) keepGuard(move string, g *backfill.SlotGuard, done bool) {
	if done {
		a.guardRates.Delete(move)
		return
	}
	a.guardRates.Store(move, g.Rate())
}
