package cutover

import "time"

// PauseSummary is what a move's cutover attempts cost the application: every
// interval during which the moving ranges were fenced on the source and not
// yet writable on the target, across all attempts, aborted ones included.
type PauseSummary struct {
	// Total is the sum of the intervals, Longest the longest one.
	Total   time.Duration `json:"total"`
	Longest time.Duration `json:"longest"`
	// Fenced counts the attempts that fenced the source (an attempt stopped
	// by its gates fences nothing and costs no pause).
	Fenced int `json:"fenced_attempts"`
	// Open: the ranges are fenced right now (an attempt in its write pause,
	// or one that crashed and is not settled yet); its interval is counted
	// up to now.
	Open bool `json:"open,omitempty"`
}

// Pauses derives the write pauses from a move's journal, oldest entry first:
// an interval starts at a fence-source record (written just before the
// fence) and ends at the next abort (written after the source is unfenced)
// or done (written after the target is unfenced), so every interval covers
// the real one. An interval still open at the end is counted up to now.
// Being derived from the journal, the figure is the same whoever asks and
// survives worker crashes and retried activities.
func Pauses(h []Entry, now time.Time) PauseSummary {
	var s PauseSummary
	var start time.Time
	fenced := false
	end := func(at time.Time) {
		d := max(at.Sub(start), 0)
		s.Total += d
		s.Longest = max(s.Longest, d)
		fenced = false
	}
	for _, e := range h {
		switch e.Step {
		case StepFenceSource:
			if fenced { // a record lost to a crash: the pause ran at least until here
				end(e.At)
			}
			start, fenced = e.At, true
			s.Fenced++
		case StepAbort, StepDone:
			if fenced {
				end(e.At)
			}
		}
	}
	if fenced {
		s.Open = true
		end(now)
	}
	return s
}
