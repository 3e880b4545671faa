package verify

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
)

// ErrMismatch is Verdict's error when the rows differ.
var ErrMismatch = errors.New("source and target differ")

// ParseDirect reads direct mode's request as `reshard verify` takes it:
// both DSNs given, tables as [schema.]table:key (all of one key type; the
// spec is named after the first) and ranges as lo:hi. Every error is bad
// input, naming the flag.
func ParseDirect(srcDSN, dstDSN string, tables, ranges []string) (tableset.Spec, []ring.Range, error) {
	var spec tableset.Spec
	if srcDSN == "" || dstDSN == "" {
		return spec, nil, errors.New("both --source-dsn and --target-dsn are needed (or RESHARD_SOURCE_DSN and RESHARD_TARGET_DSN)")
	}
	if len(tables) == 0 {
		return spec, nil, errors.New("name at least one --table table:key")
	}
	if len(ranges) == 0 {
		return spec, nil, errors.New("name at least one --range lo:hi")
	}
	for _, t := range tables {
		name, key, ok := strings.Cut(t, ":")
		if !ok || name == "" || key == "" {
			return spec, nil, fmt.Errorf("--table %q: want [schema.]table:key", t)
		}
		ts := tableset.TableSpec{Table: name, KeyColumn: key}
		if s, n, ok := strings.Cut(name, "."); ok {
			ts.Schema, ts.Table = s, n
		}
		spec.Tables = append(spec.Tables, ts)
	}
	spec.Name = spec.Tables[0].Table
	var rs []ring.Range
	for _, s := range ranges {
		r, err := ring.ParseRange(s)
		if err != nil {
			return spec, nil, fmt.Errorf("--range: %w", err)
		}
		rs = append(rs, r)
	}
	return spec, rs, nil
}

// Print renders the report, as JSON or as a table.
func (r *Report) Print(w io.Writer, asJSON bool) error {
	if !asJSON {
		return r.Table(w)
	}
	j, err := r.JSON()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(j))
	return err
}

// Verdict is nil when source and target agree, else ErrMismatch with the
// problem or the number of differing rows.
func (r *Report) Verdict() error {
	if r.Problem != "" {
		return fmt.Errorf("%w: %s", ErrMismatch, r.Problem)
	}
	if !r.OK() {
		return fmt.Errorf("%w: %d rows", ErrMismatch, r.Mismatches())
	}
	return nil
}

// RepairedMove is one move's repair, as `reshard verify --repair` prints it.
type RepairedMove struct {
	Move   string        `json:"move"`
	Source string        `json:"source"`
	Target string        `json:"target"`
	Report *RepairReport `json:"report"`
}

// PrintRepairs prints one line per table of each repaired move, then a
// summary line per move.
func PrintRepairs(out io.Writer, rs []RepairedMove) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MOVE\tSOURCE → TARGET\tTABLE\tCHUNKS\tREPAIRED\tROWS COPIED\tROWS DELETED")
	for _, r := range rs {
		for _, t := range r.Report.Tables {
			fmt.Fprintf(tw, "%s\t%s → %s\t%s\t%d\t%d\t%d\t%d\n", r.Move, r.Source, r.Target, t.Table, t.Chunks, t.Repaired, t.RowsCopied, t.RowsDeleted)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rs {
		fmt.Fprintf(out, "move %s: %d of %d chunks differed and were rewritten, %d rows copied, %d deleted, in %s\n",
			r.Move, r.Report.Repaired, r.Report.Chunks, r.Report.RowsCopied, r.Report.RowsDeleted, r.Report.Duration.Round(time.Millisecond))
	}
	return nil
}
