package devenv

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Print lists the cluster for reshard dev up: each server's DSN and data
// directory, then Temporal, the worker's configuration and where the
// password is.
func (c *Cluster) Print(out io.Writer) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tDSN\tDATA DIR")
	for _, n := range c.Nodes {
		fmt.Fprintf(w, "%s\t%s\t%s\n", n.Name, n.ClientDSN(Database), n.DataDir)
	}
	w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "temporal\t%s (namespace %s)\n", c.Temporal.Address(), Namespace)
	fmt.Fprintf(w, "temporal ui\t%s\n", c.Temporal.UIURL())
	fmt.Fprintf(w, "worker config\t%s\n", c.ConfigPath())
	fmt.Fprintf(w, "password\tin %s (reshard dev psql <name> uses it)\n", c.SecretPath())
	w.Flush()
}

// Print shows the status for reshard dev status: each server (role, state,
// pid, port, wal_level), then Temporal.
func (st *Status) Print(out io.Writer) {
	fmt.Fprintf(out, "state dir %s\n\n", st.Cluster.StateDir)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tROLE\tSTATE\tPID\tPORT\tWAL_LEVEL")
	for _, n := range st.Nodes {
		state, pid, lvl := "stopped", "-", "-"
		if n.Running {
			state, pid = "running", fmt.Sprint(n.Pid)
			lvl = n.WalLevel
			if n.Err != nil {
				lvl = "error: " + n.Err.Error()
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", n.Name, n.Role, state, pid, n.Port, lvl)
	}
	w.Flush()
	t := st.Temporal
	fmt.Fprintln(out)
	switch {
	case !t.Running:
		fmt.Fprintf(out, "temporal  stopped (%s, ui %s)\n", t.Address(), t.UIURL())
	case t.Err != nil:
		fmt.Fprintf(out, "temporal  running pid %d at %s; ui %s not answering: %v\n", t.Pid, t.Address(), t.UIURL(), t.Err)
	default:
		fmt.Fprintf(out, "temporal  running pid %d at %s (namespace %s); ui %s answers HTTP %d\n", t.Pid, t.Address(), Namespace, t.UIURL(), t.UIStatus)
	}
}

// PrintStandby says where shard's primary and synchronous standby run,
// for reshard dev standby.
func (c *Cluster) PrintStandby(out io.Writer, shard string) {
	for _, n := range c.Shards() {
		if n.Name == shard && n.Standby != nil {
			fmt.Fprintf(out, "%s: primary on port %d, synchronous standby on port %d\n%s DSN: %s\n",
				n.Name, n.Port, n.Standby.Port, n.Name, n.ClientDSN(Database))
		}
	}
}

// Print says what reshard dev failover did (kind: failover or
// switchover).
func (r FailoverResult) Print(out io.Writer, kind string) {
	fmt.Fprintf(out, "%s of %s: port %d promoted in %s (timeline %d); old primary on port %d ",
		kind, r.Shard, r.NewPort, r.PromoteTook.Round(time.Millisecond), r.Timeline, r.OldPort)
	if r.StandbyRebuilt {
		fmt.Fprintln(out, "rebuilt as the synchronous standby")
	} else {
		fmt.Fprintf(out, "left stopped (reshard dev standby %s rebuilds it)\n", r.Shard)
	}
}
