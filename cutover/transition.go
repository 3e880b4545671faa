package cutover

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Last is the newest journal entry of one journal (a move's cutover, or
// its rollback's reverse cutover: the move id and "/rollback").
type Last struct {
	ID   int64     `json:"id"`
	Step Step      `json:"step"`
	At   time.Time `json:"at"`
}

// LastSteps reads the newest journal entry of each named journal that has
// one.
func LastSteps(ctx context.Context, pool *pgxpool.Pool, journals []string) (map[string]Last, error) {
	rows, err := pool.Query(ctx, `SELECT DISTINCT ON (move) move, id, step, at FROM reshard.cutover_journal
WHERE move = ANY($1) ORDER BY move, id DESC`, journals)
	if err != nil {
		return nil, fmt.Errorf("read the cutover journals: %w", err)
	}
	out := map[string]Last{}
	var name, step string
	var l Last
	_, err = pgx.ForEachRow(rows, []any{&name, &l.ID, &step, &l.At}, func() error {
		l.Step = Step(step)
		out[name] = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the cutover journals: %w", err)
	}
	return out, nil
}

// AbortSettles is how long after an abort is journaled its unfence may still
// be running (the journal is written before the step acts, and nothing
// follows an abort in it).
const AbortSettles = time.Minute

// Midway reports whether a cutover whose newest journal entry is l is
// between its fence and its end: a step began and no end followed (the
// journal is written before each step acts; "done" after the last one), or
// an abort that may still be unfencing. Its shards' fences change as it
// goes: what they hold is neither the old topology's nor the new one's.
func Midway(l Last, now time.Time) bool {
	switch l.Step {
	case StepFenceSource, StepWaitInFlight, StepMarker, StepDrain, StepSequences, StepPublish, StepUnfenceTarget:
		return true
	case StepAbort:
		return now.Sub(l.At) < AbortSettles
	}
	return false
}

// InTransition lists the journals, of those read before and after a look
// at the shards, whose cutover was midway at either read or moved on
// between them (a cutover that began and ended meanwhile changed fences
// under the look).
func InTransition(before, after map[string]Last, now time.Time) map[string]Last {
	out := map[string]Last{}
	for name, a := range after {
		b, seen := before[name]
		switch {
		case Midway(a, now):
			out[name] = a
		case seen && Midway(b, now):
			out[name] = b
		case !seen || b.ID != a.ID:
			out[name] = a
		}
	}
	for name, b := range before {
		if _, ok := after[name]; !ok && Midway(b, now) {
			out[name] = b
		}
	}
	return out
}
