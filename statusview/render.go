package statusview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/workflows"
)

// TextBar is a fixed-width bar for one-shot output.
func TextBar(copied, est int64, width int) string {
	frac := 0.0
	if est > 0 {
		frac = min(1, float64(copied)/float64(est))
	}
	n := int(frac * float64(width))
	return "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + fmt.Sprintf("] %3.0f%%", 100*frac)
}

// Print writes the status of migration id: its phase and request, its
// retries, one line per move and the moves' predictions and failovers.
func Print(out io.Writer, id, link string, st workflows.MigrationState, now time.Time) {
	r := st.Request
	fmt.Fprintf(out, "migration %s  %s", id, st.Phase)
	if h := st.Headline(); h != "" {
		fmt.Fprintf(out, "  %s", h)
	}
	fmt.Fprintln(out)
	if r.Kind != "" {
		fmt.Fprintf(out, "%s  throttle %s  %s\n", RequestText(r), st.ThrottleNow().Text(), r.StreamText())
	}
	if link != "" {
		fmt.Fprintf(out, "ui %s\n", link)
	}
	if st.Error != "" {
		fmt.Fprintf(out, "error: %s\n", st.Error)
	}
	if st.Retrying != "" {
		fmt.Fprintf(out, "retrying %s\n", st.Retrying)
	}
	if len(st.Moves) == 0 {
		fmt.Fprintln(out, "\nno moves yet (planning)")
		return
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MOVE\tPHASE\tCOPY\tROWS\tLAG\tETA\tVERIFY\tWRITE PAUSE")
	for _, m := range st.Moves {
		v := ViewMove(m, st.ThrottleNow(), now)
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Phase, TextBar(v.Copied, v.Est, 20), v.Rows, v.Lag, v.ETA, v.Verify, v.Pause)
	}
	w.Flush()
	for _, m := range st.Moves {
		if line := PredictedText(m, now); line != "" {
			fmt.Fprintf(out, "%s → %s: %s\n", m.Spec.Source, m.Spec.Target, line)
		}
		for _, e := range m.Failovers {
			fmt.Fprintf(out, "move %s: %s\n", m.Spec.ID, e)
		}
	}
}

// RequestText says in a few words what a migration does.
func RequestText(r workflows.MigrationRequest) string {
	switch r.Kind {
	case workflows.KindSplit:
		return "split " + r.Shard + " into " + r.Into
	case workflows.KindMove:
		return fmt.Sprintf("move %s to %s", r.Range, r.To)
	default:
		return string(r.Kind) + " " + r.Shard
	}
}

// PrintChanges writes a plain line for the migration and each move whose
// line differs from the last one printed (for logs and pipes).
func PrintChanges(out io.Writer, st workflows.MigrationState, last map[string]string, now time.Time) {
	emit := func(key, line string) {
		if last[key] != line {
			last[key] = line
			fmt.Fprintf(out, "%s %s\n", now.Format("15:04:05"), line)
		}
	}
	head := fmt.Sprintf("migration %s", st.Phase)
	if h := st.Headline(); h != "" {
		head += "  " + h
	}
	if st.Retrying != "" {
		head += " (retrying " + st.Retrying + ")"
	}
	emit("", head)
	for _, m := range st.Moves {
		v := ViewMove(m, st.Request.Throttle, now)
		emit(v.Name, fmt.Sprintf("%s %s %s lag %s eta %s verify %s pause %s", v.Name, v.Phase, v.Rows, v.Lag, v.ETA, v.Verify, v.Pause))
	}
}
