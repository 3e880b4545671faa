package statusview

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/reshard/reshard/workflows"
)

// Watch is `reshard status --watch` in text: progress bars on a terminal
// (Bars), else a line per change and the next steps when they change.
type Watch struct {
	out  io.Writer
	id   string
	bars *Bars
	last map[string]string
}

// NewWatch starts the watch of migration id on out, with bars when bars is
// set; Stop ends them.
func NewWatch(out io.Writer, id string, bars bool) *Watch {
	w := &Watch{out: out, id: id, last: map[string]string{}}
	if bars {
		w.bars = NewBars(out, id)
	}
	return w
}

// Terminal says whether out is a terminal that bars can be drawn on. A
// pseudo-terminal without a size (script(1) without a terminal behind it)
// renders no bars: lines are written there too.
func Terminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false
	}
	w, _, err := term.GetSize(int(f.Fd()))
	return err == nil && w > 0
}

// Show draws st at now; at a terminal phase it ends the bars and says how
// the migration ended, with the next steps.
func (w *Watch) Show(st workflows.MigrationState, now time.Time) {
	if w.bars != nil {
		w.bars.Update(w.id, st, now)
	} else {
		PrintChanges(w.out, st, w.last, now)
		if next := strings.Join(NextSteps(w.id, st), "  |  "); next != w.last["next"] && !st.Phase.Terminal() {
			w.last["next"] = next
			fmt.Fprintf(w.out, "%s next: %s\n", now.Format("15:04:05"), next)
		}
	}
	if st.Phase.Terminal() {
		w.Stop()
		fmt.Fprintf(w.out, "migration %s ended: %s\n", w.id, st.Phase)
		PrintNextSteps(w.out, NextSteps(w.id, st))
	}
}

// Stop ends the bars (at once, and again harmlessly).
func (w *Watch) Stop() {
	if w.bars != nil {
		w.bars.Stop()
		w.bars = nil
	}
}

// PrintNextSteps is the human form of next_steps: one line.
func PrintNextSteps(out io.Writer, steps []string) {
	if len(steps) > 0 {
		fmt.Fprintf(out, "next: %s\n", strings.Join(steps, "  |  "))
	}
}

// ActionNextSteps follow an accepted operator action: what it leaves to do.
func ActionNextSteps(verb, id string) []string {
	switch verb {
	case "pause":
		return []string{"reshard resume " + id, "reshard status " + id}
	case "throttle":
		return []string{"reshard status " + id}
	}
	return []string{"reshard status " + id + " --watch"}
}

// PrintPending writes the line of an operator request Temporal holds
// unanswered (lost: no longer held, so never applied), sent at sentAt.
func PrintPending(out io.Writer, verb, requestID string, sentAt time.Time, lost bool, now time.Time) {
	ago := now.Sub(sentAt).Round(time.Second)
	if lost {
		fmt.Fprintf(out, "lost request: %s sent %s (%s ago, --request-id %s) is no longer held by Temporal (its server restarted or the workflow ended before a worker took it): it was NOT applied; send it again if it is still wanted\n",
			verb, sentAt.Local().Format(time.TimeOnly), ago, requestID)
		return
	}
	fmt.Fprintf(out, "pending request: %s sent %s (%s ago, --request-id %s), not applied yet: Temporal holds it until a worker runs the workflow\n",
		verb, sentAt.Local().Format(time.TimeOnly), ago, requestID)
}
