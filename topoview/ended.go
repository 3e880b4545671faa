package topoview

import (
	"fmt"
	"io"
	"strings"

	"github.com/reshard/reshard/topocheck"
)

// PrintCheck prints topology check's report of one keyspace: its shards
// (PrintChecks), then the migrations ended with work left, the notes and
// what was left behind (PrintEnded).
func PrintCheck(out io.Writer, r topocheck.Report) {
	PrintChecks(out, r.Of, r.Shards)
	PrintEnded(out, r.Ended, r.Notes, r.Leftovers)
}

// PrintEnded prints the migrations whose workflow ended with moves not
// ended, the notes, and the stream objects left behind, each with its fix.
func PrintEnded(out io.Writer, ended []topocheck.EndedMigration, unknown []string, left []topocheck.Leftover) {
	for _, e := range ended {
		fmt.Fprintf(out, "migration %s: its workflow has ended (%s) with %d move(s) not ended and %d range(s) migrating; fix: %s\n",
			e.Migration, e.Workflow, e.Moves, e.Migrating, e.Fix)
	}
	for _, u := range unknown {
		fmt.Fprintf(out, "note: %s\n", u)
	}
	for _, l := range left {
		state := ""
		if l.Kind == "slot" {
			state = " (inactive, retaining WAL)"
			if l.Active {
				state = " (active)"
			}
		}
		of := ""
		if l.Move != "" {
			of = fmt.Sprintf(" of move %s of migration %s, which has ended", l.Move, l.Migration)
		}
		fmt.Fprintf(out, "%-10s left behind: %s %s%s%s; fix: %s\n", l.Shard, l.Kind, l.Name, state, of, l.Fix)
	}
}

// PrintPlacement prints check placement's report of one keyspace: per
// shard, ok, skipped, or its misplaced and unplaced rows.
func PrintPlacement(out io.Writer, r topocheck.Placement) {
	fmt.Fprintf(out, "keyspace %s (topology v%d), %d table(s)", r.Keyspace, r.Version, len(r.Of.Tables))
	if r.RunningMoves > 0 {
		fmt.Fprintf(out, "; %d move(s) not ended: their rows may be on both of their shards", r.RunningMoves)
	}
	fmt.Fprintln(out)
	for _, s := range r.Shards {
		switch {
		case s.Skipped != "":
			fmt.Fprintf(out, "%-10s skipped: %s\n", s.Shard, s.Skipped)
		case len(s.Strays) == 0 && len(s.Unplaced) == 0:
			fmt.Fprintf(out, "%-10s ok: every row on its owner\n", s.Shard)
		}
		for _, st := range s.Strays {
			fmt.Fprintf(out, "%-10s misplaced: %d row(s) of %s (keys %s)\n", s.Shard, st.Rows, st.Table, strings.Join(st.Samples, ", "))
		}
		PrintUnplaced(out, s.Shard, s.Unplaced)
	}
}
