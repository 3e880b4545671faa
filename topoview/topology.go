package topoview

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/workflows"
)

// Version is `reshard topology show --json`: t with its shards (reg: the
// registry, topology.ShardRows) and its migrating ranges.
type Version struct {
	Version     int64                 `json:"version"`
	Reason      string                `json:"reason"`
	MigrationID string                `json:"migration_id,omitempty"`
	CreatedAt   time.Time             `json:"created_at"`
	Shards      []topology.ShardRow   `json:"shards"`
	Ring        *ring.Ring            `json:"ring"`
	Migrating   []topology.RangeState `json:"migrating"`
}

// VersionOf is t as Version.
func VersionOf(t topology.Topology, reg []topology.Shard) Version {
	return Version{t.Version, t.Reason, t.MigrationID, t.CreatedAt, topology.ShardRows(t, reg), t.Ring, NonNil(t.Migrating())}
}

// NonNil is s, or an empty slice for nil (JSON [] rather than null).
func NonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Dash is s, or "-" for nothing.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// PrintTopology prints t: its header, its shards (reg: the registry) and
// its migrating ranges.
func PrintTopology(out io.Writer, t topology.Topology, reg []topology.Shard) {
	fmt.Fprintf(out, "version %d  %s  %s", t.Version, t.CreatedAt.Format(time.RFC3339), t.Reason)
	if t.MigrationID != "" {
		fmt.Fprintf(out, "  (migration %s)", t.MigrationID)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SHARD\tSTATE\tVNODES\tSPACE\tWEIGHT\tDOMAIN\tCONNECTION")
	for _, s := range topology.ShardRows(t, reg) {
		conn := "-"
		if s.Conn.Host != "" {
			conn = s.Conn.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%.2f%%\t%g\t%s\t%s\n", s.Name, s.State, s.VNodes, 100*s.Space, s.Weight, Dash(s.FailureDomain), conn)
	}
	w.Flush()
	m := t.Migrating()
	if len(m) == 0 {
		fmt.Fprintln(out, "\nno range is migrating")
		return
	}
	fmt.Fprintf(out, "\n%d migrating range(s):\n", len(m))
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RANGE\tFROM\tTO\tSERVED BY")
	for _, r := range m {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Range, r.From, r.To, r.Owner)
	}
	w.Flush()
}

// PrintHistory prints topology versions, one a line.
func PrintHistory(out io.Writer, h []topology.HistoryEntry) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "VERSION\tCREATED\tSHARDS\tVNODES\tMIGRATING\tMIGRATION\tREASON")
	for _, e := range h {
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%d\t%s\t%s\n", e.Version, e.CreatedAt.Format(time.RFC3339), e.Shards, e.VNodes, e.Migrating, Dash(e.MigrationID), e.Reason)
	}
	return w.Flush()
}

// PrintSkew prints a skew report: the figures per shard, their max/median
// ratios and the hottest ranges.
func PrintSkew(out io.Writer, rep *topology.SkewReport) {
	fmt.Fprintf(out, "topology version %d, writes measured over %s\n\n", rep.Version, rep.Interval)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "SHARD\tSPACE\tROWS\tBYTES\tWRITES/S\tFOREIGN ROWS\t")
	for _, s := range rep.Shards {
		fmt.Fprintf(w, "%s\t%.2f%%\t%.0f\t%s\t%.1f\t%.0f\t\n", s.Shard, 100*s.Space, s.Rows, workflows.HumanBytes(s.Bytes), s.WritesPerSec, s.ForeignRows)
	}
	w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FIGURE\tMAX/MEDIAN\tHOTTEST")
	for _, f := range []struct {
		name string
		im   topology.Imbalance
	}{{"rows", rep.Rows}, {"bytes", rep.Bytes}, {"writes", rep.Writes}} {
		fmt.Fprintf(w, "%s\t%s\t%s\n", f.name, ratio(f.im.Ratio), Dash(f.im.Hottest))
	}
	w.Flush()
	if len(rep.HotRanges) == 0 {
		return
	}
	fmt.Fprintln(out, "\nhottest ranges (by rows):")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RANGE\tSHARD\tROWS\tOF ROWS\tOF SPACE")
	for _, r := range rep.HotRanges {
		fmt.Fprintf(w, "%s\t%s\t%.0f\t%.1f%%\t%.2f%%\n", r.Range, r.Shard, r.Rows, 100*r.RowShare, 100*r.SpaceShare)
	}
	w.Flush()
}

func ratio(r float64) string {
	if math.IsInf(r, 1) {
		return "inf (median 0)"
	}
	return fmt.Sprintf("%.2f", r)
}

// PrintRing prints t's ring: vnodes, ranges, share of the token space and
// weight per shard (reg: the registry's weights, which the last planned
// ring published set and every next plan reads), and with ranges every
// range with its owner and state.
func PrintRing(out io.Writer, t topology.Topology, reg []topology.Shard, ranges bool) {
	fmt.Fprintf(out, "topology version %d: %d shards, %d vnodes\n\n", t.Version, len(t.Ring.Shards()), t.Ring.Len())
	share := t.Ring.Share()
	weight := map[string]float64{}
	for _, sh := range reg {
		weight[sh.Name] = sh.Weight
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SHARD\tVNODES\tRANGES\tSPACE\tWEIGHT")
	vn := map[string]int{}
	for _, v := range t.Ring.VNodes() {
		vn[v.Shard]++
	}
	for _, s := range t.Ring.Shards() {
		wt := "-" // not registered
		if v, ok := weight[s]; ok {
			wt = strconv.FormatFloat(v, 'g', -1, 64)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%.2f%%\t%s\n", s, vn[s], len(t.Ring.Ranges(s)), 100*share[s], wt)
	}
	w.Flush()
	if !ranges {
		return
	}
	fmt.Fprintln(out, "\nranges (lo exclusive, hi inclusive):")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RANGE\tSHARD\tSTATE")
	for _, st := range t.States() {
		state := string(st.Status)
		if st.Status == topology.Migrating {
			state = fmt.Sprintf("migrating %s->%s", st.From, st.To)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", st.Range, st.Owner, state)
	}
	w.Flush()
}
