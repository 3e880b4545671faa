package capacity

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/cdc"
)

// WriteText prints the report for an operator: a line per move and per
// shard, the refusals with their fixes, the warnings.
func WriteText(out io.Writer, rep Report) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  MOVE\tCOPY\tCATCH-UP\tVERIFY\tPAUSE\tSLOT WAL\tTARGET GROWTH\tCLEANUP\tCLEANUP WAL")
	for _, m := range rep.Moves {
		fmt.Fprintf(w, "  %s → %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t≤ %s\n", m.Source, m.Target, dur(m.Copy), dur(m.CatchUp), dur(m.Verify),
			dur(m.WritePause), HumanBytes(m.SlotWAL), HumanBytes(m.TargetGrowth), dur(m.Cleanup), HumanBytes(m.CleanupWAL))
	}
	w.Flush()
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  SHARD\tWAL RATE\tPEAK SLOT WAL\tWAL BUDGET\tTARGET GROWTH\tDISK")
	for _, s := range rep.Shards {
		budget := "none (max_slot_wal_keep_size unlimited)"
		if s.WALBudget >= 0 {
			budget = HumanBytes(s.WALBudget) + " (" + s.WALBudgetFrom + ")"
		}
		disk := "not configured"
		if s.DiskBytes > 0 {
			disk = HumanBytes(s.DiskBytes)
		}
		fmt.Fprintf(w, "  %s\t%s/s\t%s\t%s\t%s\t%s\n", s.Shard, HumanBytes(int64(s.WALBytesPerSec)), HumanBytes(s.PeakSlotWAL), budget, HumanBytes(s.TargetGrowth), disk)
	}
	w.Flush()
	for _, m := range rep.Moves {
		fmt.Fprintf(out, "  %s: %s\n", m.ID, m.Basis)
		if m.ApplyChangesPerSec > 0 && m.Converges {
			by := ""
			if m.DecodeBound {
				by = fmt.Sprintf(" (bound by the source's decoding of the slot's %s at %s/s)", HumanBytes(m.SlotWAL), HumanBytes(int64(m.DecodeBytesPerSec)))
				if m.DecodeStreamed {
					by = fmt.Sprintf(" (bound by the source's walsender streaming the slot's %s at %s/s, after its connection)", HumanBytes(m.SlotWAL-m.DecodePeekedBytes), HumanBytes(int64(m.DecodeBytesPerSec)))
					if m.DecodePeekedBytes > 0 {
						by = fmt.Sprintf(" (bound by the source's decoding: %s of the slot's WAL read by SQL peeks at the probe's SQL rate until the stream is %s behind, the last %s streamed by the walsender at %s/s after its connection)",
							HumanBytes(m.DecodePeekedBytes), HumanBytes(cdc.DefaultPeekCatchUpBytes), HumanBytes(m.SlotWAL-m.DecodePeekedBytes), HumanBytes(int64(m.DecodeBytesPerSec)))
					}
				}
			}
			fmt.Fprintf(out, "  %s: catch-up: %d row changes held (%.0f/s in the moving ranges while the slot holds them), applied at %.0f/s while they keep coming: %s%s\n",
				m.ID, m.HeldChanges, m.ChangesPerSec, m.ApplyChangesPerSec, dur(m.CatchUp), by)
		}
	}
	for _, m := range rep.Moves {
		if m.CleanupFind > 0 {
			fmt.Fprintf(out, "  %s: cleanup: finding the moved rows among the source's %s, deleting them %s, writing their pages' full-page images %s (%s, at most): %s\n",
				m.ID, dur(m.CleanupFind), dur(m.CleanupDelete), dur(m.CleanupImages), HumanBytes(m.CleanupWAL), dur(m.Cleanup))
		}
	}
	if len(rep.Probes) > 0 {
		fmt.Fprintf(out, "  WAL rates over %s; the slot retains the source's WAL of the whole copy (its stream starts after the copy)\n", rep.Probes[0].WALWindow)
		for _, p := range rep.Probes {
			if w := p.WAL; w.FPI > 0 && p.WALBytesPerSec < w.RawRate() {
				fmt.Fprintf(out, "  %s: %s/s over the window, %.0f %% of it full-page images %s after a checkpoint; taken as %s/s, the images spread over the checkpoint cycle; a copy shorter than a cycle keeps the images of its own span of it\n",
					p.Shard, HumanBytes(int64(w.RawRate())), 100*w.FPIShare(), w.SinceCheckpoint.Round(time.Second), HumanBytes(int64(p.WALBytesPerSec)))
			}
		}
	}
	for _, wn := range rep.Warnings {
		fmt.Fprintf(out, "  warning: %s\n", wn)
	}
	for _, r := range rep.Refusals {
		fmt.Fprintf(out, "  [capacity/%s] %s: %s\n      fix: %s\n", r.Check, r.Shard, r.Problem, r.Fix)
	}
}

func dur(s Seconds) string {
	switch {
	case s < 0:
		return "never"
	case s == 0:
		return "0s"
	case s < 1:
		return s.Duration().Round(time.Millisecond).String()
	}
	return s.Duration().Round(time.Second).String()
}
