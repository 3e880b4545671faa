package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/ring"
)

// Kind names how a row differs.
type Kind string

const (
	Missing   Kind = "missing"   // on the source, not on the target
	Extra     Kind = "extra"     // on the target, not on the source
	Different Kind = "different" // on both, with different contents
)

// Mismatch is one row that differs.
type Mismatch struct {
	Key   []string   `json:"key"` // primary-key values as text, in key column order
	Kind  Kind       `json:"kind"`
	Token int64      `json:"token"`
	Range ring.Range `json:"range"`
}

// Report is the outcome of one verification.
type Report struct {
	RunID string `json:"run_id,omitempty"`
	// LSN is the source position both sides were read at; empty when no
	// applier was held (direct mode).
	LSN      string        `json:"lsn,omitempty"`
	Ranges   []ring.Range  `json:"ranges"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Rows is the number of rows compared in this attempt (not counting
	// chunks accepted from an earlier attempt); RowsPerSecond is its rate.
	Rows          int64   `json:"rows"`
	RowsPerSecond float64 `json:"rows_per_second"`
	// ReusedRows are the rows of chunks accepted from an earlier attempt of
	// the run (verified at an earlier LSN, see each chunk's), not compared
	// again.
	ReusedRows int64 `json:"reused_rows,omitempty"`
	// ReusedLSN and ReusedAt are the oldest of the reused chunks: the
	// position and the time that part of the verdict dates from.
	ReusedLSN string        `json:"reused_lsn,omitempty"`
	ReusedAt  time.Time     `json:"reused_at,omitzero"`
	Tables    []TableReport `json:"tables"`
	// Problem, when set, is why the verify cannot pass although no row
	// differs (it compared nothing while the source has rows to compare).
	Problem string `json:"problem,omitempty"`
}

// TableReport is one table: totals per moving range and every chunk.
type TableReport struct {
	Table      string        `json:"table"`
	PK         []string      `json:"pk"`
	Ranges     []RangeReport `json:"ranges"`
	Chunks     []ChunkReport `json:"chunks"`
	Mismatches int64         `json:"mismatches"`
}

// RangeReport counts the rows of one moving range (in a chunk or a table).
// Rows is the number of distinct keys compared, Matches+Mismatches.
type RangeReport struct {
	Range      ring.Range `json:"range"`
	SourceRows int64      `json:"source_rows"`
	TargetRows int64      `json:"target_rows"`
	Rows       int64      `json:"rows"`
	Matches    int64      `json:"matches"`
	Mismatches int64      `json:"mismatches"`
}

// ChunkReport is one key interval (Lo, Hi] of a table; a null bound is open.
type ChunkReport struct {
	Table      string        `json:"table"`
	Index      int           `json:"index"`
	Lo         []string      `json:"lo"`
	Hi         []string      `json:"hi"`
	SourceRows int64         `json:"source_rows"`
	TargetRows int64         `json:"target_rows"`
	Rows       int64         `json:"rows"`
	Matches    int64         `json:"matches"`
	Mismatches int64         `json:"mismatches"`
	Ranges     []RangeReport `json:"ranges"`
	// Keys samples the differing rows, at most Options.MaxSampleKeys;
	// Mismatches counts them all.
	Keys []Mismatch `json:"keys,omitempty"`
	// Resumed marks a chunk verified by an earlier attempt of the run and
	// accepted as is; LSN and VerifiedAt are from that attempt.
	Resumed       bool          `json:"resumed,omitempty"`
	LSN           string        `json:"lsn,omitempty"`
	VerifiedAt    time.Time     `json:"verified_at"`
	Duration      time.Duration `json:"duration_ns"`
	RowsPerSecond float64       `json:"rows_per_second"`
}

// Mismatches is the number of differing rows over all tables.
func (r *Report) Mismatches() int64 {
	var n int64
	for _, t := range r.Tables {
		n += t.Mismatches
	}
	return n
}

// OK reports whether source and target agree on every moving row.
func (r *Report) OK() bool { return r.Mismatches() == 0 && r.Problem == "" }

// AllKeys lists the sampled differing rows of a table, chunk by chunk.
func (t TableReport) AllKeys() []Mismatch {
	var out []Mismatch
	for _, c := range t.Chunks {
		out = append(out, c.Keys...)
	}
	return out
}

// JSON renders the report for machines.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// Table renders the report for people.
func (r *Report) Table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	status := "OK"
	if !r.OK() {
		status = fmt.Sprintf("MISMATCH (%d rows)", r.Mismatches())
	}
	at := "no applier held (direct mode)"
	if r.LSN != "" {
		at = "source LSN " + r.LSN
	}
	fmt.Fprintf(tw, "verify %s: %s; %d rows in %s (%.0f rows/s), %s\n", r.RunID, status, r.Rows, r.Duration.Round(time.Millisecond), r.RowsPerSecond, at)
	for _, t := range r.Tables {
		fmt.Fprintf(tw, "\ntable %s\tprimary key (%s)\n", t.Table, strings.Join(t.PK, ", "))
		fmt.Fprintln(tw, "RANGE\tSOURCE\tTARGET\tMATCHES\tMISMATCHES")
		for _, rr := range t.Ranges {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", rr.Range, rr.SourceRows, rr.TargetRows, rr.Matches, rr.Mismatches)
		}
		fmt.Fprintln(tw, "CHUNK\tKEYS\tROWS\tMATCHES\tMISMATCHES\tDURATION\tROWS/S\tSTATUS")
		for _, c := range t.Chunks {
			st := "ok"
			switch {
			case c.Mismatches > 0:
				st = "MISMATCH"
			case c.Resumed:
				st = "ok (earlier attempt)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%s\t%.0f\t%s\n", c.Index, interval(c.Lo, c.Hi), c.Rows, c.Matches, c.Mismatches,
				c.Duration.Round(time.Millisecond), c.RowsPerSecond, st)
		}
		if keys := t.AllKeys(); len(keys) > 0 {
			fmt.Fprintln(tw, "KIND\tKEY\tTOKEN\tRANGE")
			for _, m := range keys {
				fmt.Fprintf(tw, "%s\t(%s)\t%d\t%s\n", m.Kind, strings.Join(m.Key, ", "), m.Token, m.Range)
			}
			if n := t.Mismatches - int64(len(keys)); n > 0 {
				fmt.Fprintf(tw, "...\t%d more\t\t\n", n)
			}
		}
	}
	return tw.Flush()
}

func interval(lo, hi []string) string {
	b := func(k []string, open string) string {
		if k == nil {
			return open
		}
		return "(" + strings.Join(k, ",") + ")"
	}
	return "(" + b(lo, "-∞") + ", " + b(hi, "+∞") + "]"
}
