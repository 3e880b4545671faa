package topoview

import (
	"fmt"
	"io"
	"strings"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/rollback"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topocheck"
	"github.com/reshard/reshard/topology"
)

// PrintChecks prints what topology check found on each shard of keyspace
// k: ok, skipped, in transition, drift (and its repair or fix), misplaced
// and unplaced rows.
func PrintChecks(out io.Writer, k topology.Keyspace, checks []topocheck.Shard) {
	fmt.Fprintf(out, "keyspace %s, %d table(s)\n", k.Name, len(k.Tables))
	for _, c := range checks {
		switch {
		case c.Skipped != "":
			fmt.Fprintf(out, "%-10s skipped: %s\n", c.Shard, c.Skipped)
			continue
		case len(c.Drift) == 0 && len(c.Strays) == 0 && len(c.Unplaced) == 0:
			guard := "off"
			if c.Want.Guard {
				guard = "on"
			}
			fmt.Fprintf(out, "%-10s ok: fences as topology v%d wants (%d range(s)), TRUNCATE guard %s, %s\n", c.Shard, c.Want.Version, len(c.Want.Ranges), guard, fenceRuns(c.Have))
			continue
		}
		if len(c.InTransition) > 0 {
			for _, tr := range c.InTransition {
				fmt.Fprintf(out, "%-10s in transition: %s; its fences change as it goes, check again once it ends\n", c.Shard, tr)
			}
			for _, d := range c.Drift {
				fmt.Fprintf(out, "%-10s   (meanwhile %s)\n", c.Shard, d)
			}
			for _, s := range c.Strays {
				fmt.Fprintf(out, "%-10s misplaced: %d row(s) of %s in ranges it does not own (keys %s)\n", c.Shard, s.Rows, s.Table, strings.Join(s.Samples, ", "))
			}
			PrintUnplaced(out, c.Shard, c.Unplaced)
			continue
		}
		for _, d := range c.Drift {
			fmt.Fprintf(out, "%-10s drift: %s\n", c.Shard, d)
		}
		if len(c.Repaired) > 0 {
			fmt.Fprintf(out, "%-10s repaired: %s\n", c.Shard, strings.Join(c.Repaired, ", "))
		} else if len(c.Drift) > 0 {
			fmt.Fprintf(out, "%-10s fix: reshard topology check --repair\n", c.Shard)
		}
		for _, s := range c.Strays {
			fmt.Fprintf(out, "%-10s misplaced: %d row(s) of %s in ranges it does not own (keys %s)\n", c.Shard, s.Rows, s.Table, strings.Join(s.Samples, ", "))
		}
		PrintUnplaced(out, c.Shard, c.Unplaced)
	}
}

// fenceRuns says what the shard's fence triggers call: the C accelerator
// (the extension reshard_fence) or the plpgsql functions.
func fenceRuns(have []fence.Have) string {
	n := 0
	for _, h := range have {
		if h.Accelerated {
			n++
		}
	}
	switch n {
	case len(have):
		return "fence accelerated (C, extension reshard_fence)"
	case 0:
		return "fence in plpgsql (no extension reshard_fence on the shard)"
	}
	return fmt.Sprintf("fence accelerated on %d of %d tables, plpgsql on the others", n, len(have))
}

// printUnplaced reports rows with a NULL shard key: owned by no shard.
func PrintUnplaced(out io.Writer, shard string, rows []tableset.NullKeyRows) {
	for _, u := range rows {
		fmt.Fprintf(out, "%-10s not placed: %d row(s) of %s with a NULL shard key, owned by no shard (primary keys %s): give them a key or delete them, then ALTER TABLE ... ALTER COLUMN ... SET NOT NULL\n",
			shard, u.Rows, u.Table, strings.Join(u.Samples, ", "))
	}
}

// Recovery prints what reshard recover did: a line per move, then the
// migration's end (or that nothing was left).
func Recovery(out io.Writer, rec rollback.Recovery) {
	for _, m := range rec.Moves {
		fmt.Fprintf(out, "move %s (%s → %s): %s\n", m.Move, m.From, m.To, m.Action)
	}
	switch {
	case rec.Version > 0:
		fmt.Fprintf(out, "migration %s: ended, topology v%d of keyspace %s has no range of it migrating; its slots, publications, origins, holds and guards are gone\n",
			rec.MigrationID, rec.Version, rec.Keyspace)
	default:
		fmt.Fprintf(out, "migration %s: nothing left to recover (%s)\n", rec.MigrationID, rec.Note)
	}
}
