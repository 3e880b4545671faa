package statusview

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-runewidth"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/reshard/reshard/workflows"
)

// Bars is `reshard status --watch` on a terminal: one progress bar per
// move, with its phase before and lag, ETA, verify and write pause after.
type Bars struct {
	p      *mpb.Progress
	mu     sync.Mutex
	header *mpb.Bar // the migration's own line, above the moves
	bars   map[string]*mpb.Bar
	text   map[string]MoveView
	head   string
}

// NewBars starts the bars of migration id on out; Stop ends them.
func NewBars(out io.Writer, id string) *Bars {
	v := &Bars{bars: map[string]*mpb.Bar{}, text: map[string]MoveView{}, head: "migration " + id}
	v.p = mpb.New(mpb.WithOutput(out), mpb.WithWidth(100), mpb.WithRefreshRate(200*time.Millisecond), mpb.WithAutoRefresh())
	v.header = v.p.New(0, mpb.NopStyle(), mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.head
	})))
	return v
}

// Update shows st at now. It sets the texts under the lock and moves the
// bars outside it: a bar's render goroutine calls the decorators, which
// take the lock.
func (v *Bars) Update(id string, st workflows.MigrationState, now time.Time) {
	head := fmt.Sprintf("migration %s  %s", id, st.Phase)
	if h := st.Headline(); h != "" {
		head += "  " + h
	}
	if st.Retrying != "" {
		head += "  retrying " + st.Retrying
	}
	v.mu.Lock()
	v.head = head
	v.mu.Unlock()
	for _, m := range st.Moves {
		mv := ViewMove(m, st.Request.Throttle, now)
		key := mv.Name
		v.mu.Lock()
		v.text[key] = mv
		b, ok := v.bars[key]
		v.mu.Unlock()
		if !ok {
			get := func() MoveView { v.mu.Lock(); defer v.mu.Unlock(); return v.text[key] }
			// total 0: the bar never completes by itself (estimates can be low).
			// The bar's own line holds only short cells (the move, its
			// phase's name, the percentage), so the bar keeps its width
			// whatever the phase says; the figures and the phase's long
			// text (waiting for approval, a failover, an error) go on a
			// line of their own below it, cut to the width.
			b = v.p.AddBar(0,
				mpb.PrependDecorators(
					decor.Any(func(decor.Statistics) string { return get().Name }, decor.WCSyncSpaceR),
					decor.Any(func(decor.Statistics) string { return phaseCell(get().Phase) }, decor.WCSyncSpaceR),
				),
				mpb.AppendDecorators(
					decor.Any(func(decor.Statistics) string {
						t := get()
						pct := 0.0
						if t.Est > 0 {
							pct = min(100, 100*float64(t.Copied)/float64(t.Est))
						}
						return fmt.Sprintf("%3.0f%%", pct)
					}),
				),
				mpb.BarBtmExtender(mpb.BarFillerFunc(func(w io.Writer, stat decor.Statistics) error {
					_, err := io.WriteString(w, figuresLine(get(), stat.AvailableWidth)+"\n")
					return err
				})))
			v.mu.Lock()
			v.bars[key] = b
			v.mu.Unlock()
		}
		if mv.Est > 0 {
			b.SetTotal(max(mv.Est, mv.Copied), false)
		}
		b.SetCurrent(mv.Copied) // the copy's rows, or a running verify's
	}
}

// phaseCellWidth bounds the phase's cell on a bar's line: the longest phase
// name (SNAPSHOT_COPY, CDC_CATCH_UP) fits.
const phaseCellWidth = 13

// phaseCell is the phase's name for the bar's line: the text before its
// details, cut to phaseCellWidth.
func phaseCell(phase string) string {
	if i := strings.IndexAny(phase, " :("); i > 0 {
		phase = phase[:i]
	}
	if len(phase) > phaseCellWidth {
		phase = phase[:phaseCellWidth]
	}
	return phase
}

// figuresLine is the line under a move's bar: its rows, lag, ETA, verify
// and write pause, then the phase's details, cut to width columns.
func figuresLine(t MoveView, width int) string {
	line := fmt.Sprintf("    %s  lag %s  eta %s  verify %s  pause %s", t.Rows, t.Lag, t.ETA, t.Verify, t.Pause)
	if rest := strings.TrimSpace(strings.TrimPrefix(t.Phase, phaseCell(t.Phase))); rest != "" {
		line += "  " + rest
	}
	if width > 1 && runewidth.StringWidth(line) > width {
		line = runewidth.Truncate(line, width, "…")
	}
	return line
}

// Stop draws the bars a last time and ends them (a nil Bars: nothing).
func (v *Bars) Stop() {
	if v == nil || v.p == nil {
		return
	}
	v.mu.Lock()
	bars := []*mpb.Bar{v.header}
	for _, b := range v.bars {
		bars = append(bars, b)
	}
	v.mu.Unlock()
	for _, b := range bars {
		b.SetTotal(-1, true)
	}
	v.p.Wait()
	v.p = nil
}
