package plan

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/reshard/reshard/backfill"
	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/cutover"
	"github.com/reshard/reshard/tableset"
)

// CheckOptions are a migration's settings that PLAN's checks read: the
// tables, the copy's throttle (the ETA), the capacity model's options and
// budgets, and the cutover's budget.
type CheckOptions struct {
	Tables   tableset.Spec
	Capacity capacity.AssessOptions
	// StreamAuto resolves Capacity.Options.StreamDuringCopy, which was not
	// given (MigrationRequest.StreamAuto): a table the copy gate cannot
	// order turns it off (Check.StreamAfterCopy says which) instead of
	// being a problem. The CLI resolves it, once, before the workflow
	// starts; the worker's PLAN checks the resolved value.
	StreamAuto bool
}

// Check is everything PLAN finds out about a plan before anything changes:
// the preflight of every move, the predicted cost, and the steps of a
// cutover.
type Check struct {
	Report
	// Capacity is the predicted cost; nil when preflight found problems
	// (the probe needs the tables it checks).
	Capacity *capacity.Report
	// CutoverSteps are the steps every move's cutover runs, as the dry run
	// of the first move's says them.
	CutoverSteps []string
	// StreamDuringCopy is whether the moves stream during their copies,
	// as the capacity model predicted them; StreamAfterCopy, why not when
	// CheckOptions.StreamAuto turned it off.
	StreamDuringCopy bool
	StreamAfterCopy  string
}

// Problems counts the preflight's problems and the capacity model's
// refusals: a plan with any is refused.
func (c Check) Problems() int {
	n := c.Report.Problems
	if c.Capacity != nil {
		n += len(c.Capacity.Refusals)
	}
	return n
}

// Checks runs PLAN's checks of p: Preflight of every move, then, when it
// found no problem, the capacity model (capacity.Assess), and the cutover's
// dry run. The CLI's dry run and the worker's PLAN both run it, so the plan
// printed is the plan refused or stored. It changes nothing; problems and
// refusals are in the result, the error is a server that could not be
// asked.
func Checks(ctx context.Context, shards Shards, p Plan, o CheckOptions) (Check, error) {
	co := o.Capacity.Options
	pf, err := Preflight(ctx, shards, o.Tables, p.Grouped, Throttle{RowsPerSec: co.RowsPerSec, BytesPerSec: co.BytesPerSec})
	if err != nil {
		return Check{}, err
	}
	var why string
	co.StreamDuringCopy, why = streamCheck(&pf, co.StreamDuringCopy, o.StreamAuto)
	c := Check{Report: pf, StreamDuringCopy: co.StreamDuringCopy, StreamAfterCopy: why}
	o.Capacity.Options = co // the model predicts the resolved value
	if pf.Problems == 0 {
		var in []capacity.MoveInput
		for _, m := range pf.Moves {
			in = append(in, capacity.MoveInput{ID: moveName(m.Move.ID, m.Move.From, m.Move.To, " → "), Source: m.Move.From, Target: m.Move.To,
				Ranges: m.Move.Ranges, Tables: m.Source.Tables, Estimates: m.Estimates})
		}
		rep, err := capacity.Assess(ctx, capacity.Pools(shards), in, o.Capacity)
		if err != nil {
			return Check{}, err
		}
		c.Capacity = &rep
	}
	if c.CutoverSteps, err = cutoverSteps(ctx, p, co.CutoverBudget); err != nil {
		return Check{}, err
	}
	return c, nil
}

// streamCheck checks the stream during the copy (on) against the tables
// the preflight read: given (not auto), each table the copy gate cannot
// order is a problem of pf; left to the default (auto), the first such
// table turns it off, and why says so. It returns the stream's value.
func streamCheck(pf *Report, on, auto bool) (_ bool, why string) {
	if !on || len(pf.Moves) == 0 {
		return on, ""
	}
	first := &pf.Moves[0] // every move copies the same tables
	if auto {
		if why = backfill.StreamAfterCopyReason(first.Source); why != "" {
			return false, why
		}
		return true, ""
	}
	probs := backfill.StreamDuringCopyProblems(first.Source, first.Move.From)
	first.Problems = append(first.Problems, probs...)
	pf.Problems += len(probs)
	return true, ""
}

// moveName is a move's id, or in a dry run (no ids) its pair.
func moveName(id, from, to, sep string) string {
	if id != "" {
		return id
	}
	return from + sep + to
}

// cutoverSteps are the steps of the first move's cutover, as its dry run
// says them: every move's cutover runs the same steps.
func cutoverSteps(ctx context.Context, p Plan, budget time.Duration) ([]string, error) {
	if len(p.Grouped) == 0 {
		return nil, nil
	}
	var steps bytes.Buffer
	first := p.Grouped[0]
	frozen := time.Now() // a dry run takes no time: the budgets print whole
	if _, err := cutover.Run(ctx, cutover.DryRun{W: &steps, Move: moveName(first.ID, first.From, first.To, "->"), Source: first.From,
		Target: first.To, Ranges: first.Ranges, Version: p.From.Version + 1}, cutover.NopJournal{}, cutover.Options{Budget: budget, Now: func() time.Time { return frozen }}); err != nil {
		return nil, fmt.Errorf("cutover dry run: %w", err)
	}
	return strings.Split(strings.TrimRight(steps.String(), "\n"), "\n"), nil
}
