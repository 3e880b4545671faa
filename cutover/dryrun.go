package cutover

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
)

// DryRun is an Actions that changes nothing and prints what each step would
// do, for `reshard plan` and operators rehearsing a cutover.
type DryRun struct {
	W              io.Writer
	Move           string
	Source, Target string
	Ranges         []ring.Range
	Version        int64 // the topology version the cutover starts from
}

func (d DryRun) say(format string, args ...any) { fmt.Fprintf(d.W, format+"\n", args...) }

func (d DryRun) Gates(context.Context) error {
	d.say("1. gates: copy done, verify passed, CDC lag under threshold, approval if required (move %s)", d.Move)
	return nil
}

func (d DryRun) FenceSource(context.Context) error {
	d.say("2. fence %d range(s) on source %s: application writes to them now fail with SQLSTATE %s (write pause starts)", len(d.Ranges), d.Source, pgerr.CodeFenced)
	for _, r := range ring.Normalize(d.Ranges) {
		d.say("     %s", r)
	}
	return nil
}

func (d DryRun) WaitInFlight(_ context.Context, budget time.Duration) error {
	d.say("3. wait (at most %s) until no session on %s holds an xid or snapshot older than the fence, or a write lock on a fenced table taken before it", budget, d.Source)
	return nil
}

func (d DryRun) EmitMarker(context.Context) (string, error) {
	m := "cutover:" + d.Move
	d.say("4. emit marker pg_logical_emit_message(true, 'reshard', %q) on %s", m, d.Source)
	return m, nil
}

func (d DryRun) Drain(_ context.Context, marker string, budget time.Duration) error {
	d.say("5. drain CDC on %s up to marker %q (at most %s)", d.Target, marker, budget)
	return nil
}

func (d DryRun) AdvanceSequences(context.Context) error {
	d.say("6. on %s, set each sequence owned by a moving table's column (identity, serial) past every value the column holds there", d.Target)
	return nil
}

func (d DryRun) Publish(context.Context) (int64, error) {
	d.say("7. publish topology v%d (compare-and-set on v%d) with the ranges owned by %s — point of no return", d.Version+1, d.Version, d.Target)
	return d.Version + 1, nil
}

func (d DryRun) Published(context.Context) (bool, error) { return false, nil }

func (d DryRun) UnfenceTarget(context.Context) error {
	d.say("8. unfence the ranges on target %s (write pause ends); %s keeps its fences", d.Target, d.Source)
	return nil
}

func (d DryRun) UnfenceSource(context.Context) error {
	d.say("   (on abort) unfence the ranges on source %s", d.Source)
	return nil
}

// NopJournal records nothing (dry runs).
type NopJournal struct{}

func (NopJournal) Record(context.Context, Step, string) error { return nil }
func (NopJournal) Last(context.Context) (Step, error)         { return "", nil }
