package demo

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/testkit/ledger"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// LedgerKeys spreads n keys over 1..users.
func LedgerKeys(users int64, n int) []int64 {
	if int64(n) > users {
		n = int(users)
	}
	step := users / int64(n)
	keys := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		keys = append(keys, 1+int64(i)*step)
	}
	return keys
}

// SumValues is the sum of m's values.
func SumValues(m map[string]int64) int64 {
	var s int64
	for _, v := range m {
		s += v
	}
	return s
}

// Summary is what the demo found: the migration's last state, its plan's
// figures, the final topology and the ledger's and placement's checks.
type Summary struct {
	State                workflows.MigrationState
	Moved, Modulo, Ideal float64 // fractions of the token space (the plan's)
	Final                topology.Topology
	Stats                *ledger.Stats
	Mismatches           []ledger.Mismatch
	Placement            Placement
	PeakLag              int64
	Rows                 int64
	Elapsed              time.Duration
	Ledger               int
	ETAs                 map[string]*ETACheck // by move id
}

// ETACheck compares the copy ETA status showed once a move had copied 10%
// of its estimated rows with the time its copy then really took: the
// predicted end (the instant status showed the ETA at, plus the ETA: the
// copy's own CopyEnd) against the end of SNAPSHOT_COPY in the move's
// timings, the error relative to the time that was left when it was shown.
type ETACheck struct {
	At     time.Time // when the move first showed 10% or more with an ETA
	End    time.Time // the end it predicted (At + the ETA shown)
	Copied float64   // the fraction of the estimate copied then
}

// Observe records the move's first ETA past 10% copied.
func (e *ETACheck) Observe(m workflows.MoveState, now time.Time) {
	if !e.At.IsZero() || m.CopyDone || m.CopyEnd.IsZero() || m.Spec.EstRows <= 0 || m.RowsCopied*10 < m.Spec.EstRows {
		return
	}
	e.At, e.End, e.Copied = now, m.CopyEnd, float64(m.RowsCopied)/float64(m.Spec.EstRows)
}

// etaJudgedBy is how far into a copy its first estimate may come and be
// judged: the copy's rate window needs a second of chunks, which is most of
// a copy of seconds.
const etaJudgedBy = 0.25

// predicted is the ETA status showed (never below zero, as status shows it).
func (e *ETACheck) predicted() time.Duration { return max(e.End.Sub(e.At), 0) }

// actual is the rest of the copy as it happened: from the prediction to
// the end of SNAPSHOT_COPY in the move's own timings (0: not known).
func (e *ETACheck) actual(m workflows.MoveState) time.Duration {
	for _, t := range m.Timings {
		if t.Phase == workflows.PhaseSnapshotCopy && !t.End.IsZero() && !e.At.IsZero() && t.End.After(e.At) {
			return t.End.Sub(e.At)
		}
	}
	return 0
}

// moveFigures are the moves' totals the summary prints.
type moveFigures struct {
	rows, bytes, verified int64
	verifyOK              bool
	pauses                []time.Duration // sorted
	phase                 map[workflows.Phase]time.Duration
	copyRate              []float64
	copyStart, copyEnd    time.Time
}

func figures(moves []workflows.MoveState) moveFigures {
	f := moveFigures{verifyOK: len(moves) > 0, phase: map[workflows.Phase]time.Duration{}}
	for _, m := range moves {
		f.rows += m.RowsCopied
		f.bytes += m.BytesCopied
		if m.Verify == nil || !m.Verify.Passed {
			f.verifyOK = false
		} else {
			f.verified += m.Verify.Rows
		}
		if p := max(m.Pauses.Total, m.WritePause); p > 0 {
			f.pauses = append(f.pauses, p) // every attempt's pause, aborted ones included
		}
		for _, t := range m.Timings {
			if t.End.IsZero() {
				continue
			}
			d := t.End.Sub(t.Start)
			f.phase[t.Phase] = max(f.phase[t.Phase], d)
			if t.Phase == workflows.PhaseSnapshotCopy && d > 0 {
				f.copyRate = append(f.copyRate, float64(m.RowsCopied)/d.Seconds())
				if f.copyStart.IsZero() || t.Start.Before(f.copyStart) {
					f.copyStart = t.Start
				}
				if t.End.After(f.copyEnd) {
					f.copyEnd = t.End
				}
			}
		}
	}
	slices.Sort(f.pauses)
	return f
}

// phaseLine is the slowest move's time in each phase, in phase order.
func (f moveFigures) phaseLine() string {
	var names []string
	for p := range f.phase {
		names = append(names, string(p))
	}
	order := func(p string) int { return slices.Index(workflows.Phases, workflows.Phase(p)) }
	sort.Slice(names, func(i, j int) bool { return order(names[i]) < order(names[j]) })
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s", n, f.phase[workflows.Phase(n)].Round(10*time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// Print writes the summary.
func (s Summary) Print(out io.Writer) {
	st := s.State
	f := figures(st.Moves)
	fmt.Fprintf(out, "\n== reshard demo: add-node %s ==\n", st.Request.Shard)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "rows in the cluster\t%d (users + orders)\n", s.Rows)
	fmt.Fprintf(w, "rows moved\t%d (%s)\n", f.rows, workflows.HumanBytes(f.bytes))
	fmt.Fprintf(w, "moved fraction\t%.4f of the token space (modulo would move %.4f; ideal %.4f)\n", s.Moved, s.Modulo, s.Ideal)
	fmt.Fprintf(w, "moves\t%d (one slot each), migration took %s\n", len(st.Moves), s.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "phase durations (slowest move)\t%s\n", f.phaseLine())
	if len(f.copyRate) > 0 {
		var total float64
		for _, r := range f.copyRate {
			total += r
		}
		fmt.Fprintf(w, "copy rate\t%.0f rows/s in all (%d moves in parallel, %.0f rows/s each on average)\n",
			float64(f.rows)/f.copyEnd.Sub(f.copyStart).Seconds(), len(f.copyRate), total/float64(len(f.copyRate)))
	}
	fmt.Fprintf(w, "CDC lag peak\t%s\n", workflows.HumanBytes(s.PeakLag))
	if len(f.pauses) > 0 {
		fmt.Fprintf(w, "write pause\tp50 %s, p99 %s, max %s over %d cutovers\n", pct(f.pauses, 0.50), pct(f.pauses, 0.99), f.pauses[len(f.pauses)-1].Round(time.Millisecond), len(f.pauses))
	}
	for _, m := range st.Moves {
		pause := m.PauseText()
		if len(m.PauseSteps) > 0 {
			pause += " (" + workflows.PauseStepsText(m.PauseSteps) + ")"
		}
		fmt.Fprintf(w, "  %s → %s\t%s, %d rows copied, write pause %s\n", m.Spec.Source, m.Spec.Target, m.Phase, m.RowsCopied, pause)
	}
	if line := etaLine(st.Moves, s.ETAs); line != "" {
		fmt.Fprintf(w, "copy ETA at 10%%\t%s\n", line)
	}
	verdict := "FAILED"
	if f.verifyOK {
		verdict = "passed"
	}
	fmt.Fprintf(w, "verify\t%s (%d rows compared at one LSN)\n", verdict, f.verified)
	fmt.Fprintf(w, "topology\tv%d: %s\n", s.Final.Version, strings.Join(s.Final.Ring.Shards(), ", "))
	fmt.Fprintf(w, "writes acknowledged\t%d (%d failed, %d fence errors after retries) on %d keys\n", s.Stats.Acked.Load(), s.Stats.Failed.Load(), s.Stats.FenceErrors.Load(), s.Ledger)
	fmt.Fprintf(w, "acknowledged writes lost\t%d\n", len(s.Mismatches))
	fmt.Fprintf(w, "rows not on their owner\t%d\n", SumValues(s.Placement.Misplaced))
	w.Flush()
	for i, m := range s.Mismatches {
		if i == 10 {
			fmt.Fprintf(out, "  ... and %d more\n", len(s.Mismatches)-10)
			break
		}
		fmt.Fprintf(out, "  lost: %s\n", m)
	}
}

// pct is the q-quantile of sorted durations (nearest rank).
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i].Round(time.Millisecond)
}

// etaLine compares each move's first ETA past 10% with the time its copy
// then took; the worst error counts the estimates shown by etaJudgedBy
// copied ("" when no move showed one).
func etaLine(moves []workflows.MoveState, etas map[string]*ETACheck) string {
	worst, judged := -1.0, 0
	var etaParts []string
	for _, m := range moves {
		e := etas[m.Spec.ID]
		if e == nil || e.At.IsZero() {
			continue
		}
		if act := e.actual(m); act > 0 {
			errPct := 100 * math.Abs(float64(e.predicted()-act)) / float64(act)
			note := ""
			if e.Copied <= etaJudgedBy {
				worst, judged = max(worst, errPct), judged+1
			} else {
				note = ", late"
			}
			etaParts = append(etaParts, fmt.Sprintf("%s→%s at %.0f%% %s vs %s (%.0f%%%s)", m.Spec.Source, m.Spec.Target, 100*e.Copied,
				e.predicted().Round(100*time.Millisecond), act.Round(100*time.Millisecond), errPct, note))
		}
	}
	if len(etaParts) == 0 {
		return ""
	}
	verdict := fmt.Sprintf("worst error %.0f%%", worst)
	if judged < len(etaParts) {
		verdict = fmt.Sprintf("worst error %.0f%% over the %d shown by %.0f%% copied; a copy of seconds shows its first estimate later (late)",
			worst, judged, 100*etaJudgedBy)
		if judged == 0 {
			verdict = fmt.Sprintf("not judged: no first estimate by %.0f%% copied (the copies took seconds; try --users 4000000 or --rows-per-sec)", 100*etaJudgedBy)
		}
	}
	return fmt.Sprintf("predicted vs actual: %s; %s", strings.Join(etaParts, ", "), verdict)
}
