package topoview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/reshard/reshard/topology"
)

// Init is `reshard init --json`: the first topology of a keyspace (or the
// one that exists), its ring's shares, the configured shards it leaves
// out, the control database (its DSN redacted by the caller) and the
// keyspace registered.
type Init struct {
	Version    int64              `json:"version"`
	Published  bool               `json:"published"`
	Shards     map[string]float64 `json:"shards"`
	VNodes     int                `json:"vnodes"`
	NotInRing  []string           `json:"not_in_ring"`
	Reason     string             `json:"reason"`
	ControlDSN string             `json:"control"`
	Keyspace   *topology.Keyspace `json:"keyspace,omitempty"`
}

// InitOf is Init for t (published: by this init) and the configured
// shards (sorted).
func InitOf(t topology.Topology, published bool, configured []string, control string, ks *topology.Keyspace) Init {
	return Init{t.Version, published, t.Ring.Share(), t.Ring.Len(), NonNil(NotInRing(configured, t)), t.Reason, control, ks}
}

// NotInRing are the configured shards t's ring does not name.
func NotInRing(configured []string, t topology.Topology) []string {
	var out []string
	for _, n := range configured {
		if !t.Ring.HasShard(n) {
			out = append(out, n)
		}
	}
	return out
}

// PrintInit prints what reshard init did: the topology published (or
// found), the control database (redacted), the ring's shards and the
// configured shards left out of it.
func PrintInit(out io.Writer, t topology.Topology, published bool, configured []string, control string) {
	if published {
		fmt.Fprintf(out, "published topology v%d (%s)\n", t.Version, t.Reason)
	} else {
		fmt.Fprintf(out, "topology exists: v%d (%s); nothing published (--shards, --vnodes, --tokens apply only to the first version)\n", t.Version, t.Reason)
	}
	fmt.Fprintf(out, "control database %s\n\n", control)
	share := t.Ring.Share()
	vn := map[string]int{}
	for _, v := range t.Ring.VNodes() {
		vn[v.Shard]++
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "SHARD\tVNODES\tSPACE")
	for _, s := range t.Ring.Shards() {
		fmt.Fprintf(w, "%s\t%d\t%.2f%%\n", s, vn[s], 100*share[s])
	}
	w.Flush()
	if rest := NotInRing(configured, t); len(rest) > 0 {
		fmt.Fprintf(out, "\nconfigured but not in the ring: %s (bring one in with reshard add-node %s)\n", strings.Join(rest, ", "), rest[0])
	}
}

// PrintKeyspace prints a keyspace and its tables.
func PrintKeyspace(out io.Writer, k topology.Keyspace) {
	fmt.Fprintf(out, "keyspace %s (key type %s), %d table(s)\n", k.Name, k.KeyType, len(k.Tables))
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  TABLE\tKEY")
	for _, t := range k.Tables {
		fmt.Fprintf(w, "  %s.%s\t%s\n", t.Schema, t.Table, t.KeyColumn)
	}
	w.Flush()
}
