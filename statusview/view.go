package statusview

import (
	"fmt"
	"strings"
	"time"

	"github.com/reshard/reshard/workflows"
)

// MoveView is what status shows of one move.
type MoveView struct {
	Name, Phase, Rows, Lag, ETA, Verify, Pause string
	Copied, Est                                int64
}

// ViewMove is the texts of a move's status line at now, and its bar's
// figures (the copy's rows, or a running verify's).
func ViewMove(m workflows.MoveState, throttle workflows.Throttle, now time.Time) MoveView {
	v := MoveView{Name: m.Spec.Source + " → " + m.Spec.Target, Phase: m.PhaseText(), Copied: m.RowsCopied, Est: m.Spec.EstRows}
	if m.CopyDone && m.RowsCopied > 0 {
		v.Est = m.RowsCopied // the estimate was only an estimate: a finished copy is 100%
	}
	if m.Error != "" {
		v.Phase += ": " + m.Error
	}
	if strings.HasPrefix(m.Retrying, "waiting: ") {
		v.Phase += " (" + m.Retrying + ")" // not a failure: the move waits for the shards' schemas
	} else if m.Retrying != "" {
		v.Phase += " (retrying " + m.Retrying + ")"
	}
	v.Rows = fmt.Sprintf("%d/%d rows", m.RowsCopied, m.Spec.EstRows)
	v.Lag = m.LagText()
	v.ETA = m.ETAText(throttle, now)
	v.Verify = "-"
	if m.Verify != nil {
		v.Verify = m.Verify.Text(now)
	} else if p := m.VerifyProgress; p != nil && m.Phase == workflows.PhaseVerify {
		// The bar, the rows and the ETA are the verify's while it runs.
		v.Verify = p.Text()
		v.Copied, v.Est = p.Rows, p.EstRows
		v.Rows = fmt.Sprintf("%d/%d rows compared", p.Rows, p.EstRows)
		v.ETA = "?"
		if !p.End.IsZero() {
			v.ETA = max(p.End.Sub(now), 0).Round(time.Second).String()
		}
	} else if m.Phase == workflows.PhaseVerify {
		v.Verify = "running"
	}
	v.Pause = m.PauseText()
	if v.Pause == "" {
		v.Pause = "-"
	}
	return v
}

// PredictedText sets a move's phases against what the capacity model
// predicted when it was planned: "copy 3m12s of predicted 3m40s, catch-up
// …". "" for a move planned without a prediction.
func PredictedText(m workflows.MoveState, now time.Time) string {
	p := m.Spec.Predicted
	if p == nil {
		return ""
	}
	var parts []string
	for _, ph := range []struct {
		name  string
		phase workflows.Phase
		want  time.Duration
	}{{"copy", workflows.PhaseSnapshotCopy, p.Copy}, {"catch-up", workflows.PhaseCDCCatchUp, p.CatchUp}, {"verify", workflows.PhaseVerify, p.Verify}} {
		want := roundAbout(ph.want)
		if ph.want < 0 {
			want = "never ending"
		}
		took, ok := phaseTook(m, ph.phase, now)
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("%s predicted %s", ph.name, want))
		case ph.phase == workflows.PhaseSnapshotCopy && m.Phase == ph.phase && !m.CopyDone:
			parts = append(parts, fmt.Sprintf("%s %s of predicted %s", ph.name, roundAbout(took), want)+ownRate(m, took, now))
		default:
			parts = append(parts, fmt.Sprintf("%s %s of predicted %s", ph.name, roundAbout(took), want))
		}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; slot WAL predicted %s", workflows.HumanBytes(p.SlotWALBytes))
}

// ownRate is a running copy's length predicted again from its own rate
// (the rows it copied over the time it took, up to its last report), once
// a tenth of the estimate is copied: " (4m10s at its own rate)". The
// probe's prediction was made before the copy; this one sees what the
// copy meets.
func ownRate(m workflows.MoveState, took time.Duration, now time.Time) string {
	if m.Spec.EstRows <= 0 || m.RowsCopied*10 < m.Spec.EstRows {
		return ""
	}
	if !m.UpdatedAt.IsZero() && m.UpdatedAt.Before(now) {
		took -= now.Sub(m.UpdatedAt) // the rows are those of the last report
	}
	if took <= 0 {
		return ""
	}
	total := time.Duration(float64(took) * float64(m.Spec.EstRows) / float64(m.RowsCopied))
	return fmt.Sprintf(" (%s at its own rate)", roundAbout(total))
}

// phaseTook is the time the move spent in phase (so far, while in it),
// summed over its visits; false when it never entered it.
func phaseTook(m workflows.MoveState, phase workflows.Phase, now time.Time) (time.Duration, bool) {
	var (
		d  time.Duration
		ok bool
	)
	for _, t := range m.Timings {
		if t.Phase != phase || t.Start.IsZero() {
			continue
		}
		end := t.End
		if end.IsZero() {
			end = now
		}
		d += end.Sub(t.Start)
		ok = true
	}
	return d, ok
}

// roundAbout rounds a duration for reading: to the second, or the
// millisecond under a second.
func roundAbout(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
