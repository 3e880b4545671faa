package devenv

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// reshard dev status: a running server shows its pid and wal_level (or
// why it did not answer), a stopped one dashes; Temporal's line says
// whether its UI answers.
func TestStatusPrint(t *testing.T) {
	c := &Cluster{StateDir: "/tmp/x", Temporal: Temporal{Port: 7233, UIPort: 8233}}
	st := &Status{Cluster: c, Nodes: []NodeStatus{
		{Node: Node{Server: Server{Name: "control", Port: 5433}, Role: "control"}, Running: true, WalLevel: "logical"},
		{Node: Node{Server: Server{Name: "shard1", Port: 5434}, Role: "shard", Pid: 42}, Running: true, Err: errors.New("refused")},
		{Node: Node{Server: Server{Name: "shard2", Port: 5435}, Role: "shard"}},
	}, Temporal: TemporalStatus{Temporal: Temporal{Port: 7233, UIPort: 8233, Pid: 7}, Running: true, UIStatus: 200}}
	st.Nodes[0].Pid = 41
	var b strings.Builder
	st.Print(&b)
	want := `state dir /tmp/x

NAME     ROLE     STATE    PID  PORT  WAL_LEVEL
control  control  running  41   5433  logical
shard1   shard    running  42   5434  error: refused
shard2   shard    stopped  -    5435  -

temporal  running pid 7 at 127.0.0.1:7233 (namespace ` + Namespace + `); ui http://127.0.0.1:8233 answers HTTP 200
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	st.Temporal.Running = false
	b.Reset()
	st.Print(&b)
	if !strings.HasSuffix(b.String(), "temporal  stopped (127.0.0.1:7233, ui http://127.0.0.1:8233)\n") {
		t.Errorf("stopped Temporal:\n%s", b.String())
	}
}

// reshard dev up: every server with its DSN (no password) and data
// directory, then Temporal, the worker configuration and the password's
// file.
func TestClusterPrint(t *testing.T) {
	c := &Cluster{StateDir: "/tmp/x", Nodes: []Node{{Server: Server{Name: "control", Port: 5433, DataDir: "/tmp/x/pg/control", Password: "s3cret"}}},
		Temporal: Temporal{Port: 7233, UIPort: 8233}}
	var b strings.Builder
	c.Print(&b)
	out := b.String()
	for _, want := range []string{"NAME     DSN", "control  postgres://postgres@127.0.0.1:5433/", "/tmp/x/pg/control", "temporal       127.0.0.1:7233 (namespace " + Namespace + ")",
		"temporal ui    http://127.0.0.1:8233", "worker config  /tmp/x/" + ConfigFile, "password       in /tmp/x/" + SecretFile} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("the password is printed:\n%s", out)
	}
}

func TestFailoverResultPrint(t *testing.T) {
	var b strings.Builder
	r := FailoverResult{Shard: "shard2", OldPort: 5001, NewPort: 5002, Timeline: 3, PromoteTook: 1234567 * time.Microsecond, StandbyRebuilt: true}
	r.Print(&b, "failover")
	r.StandbyRebuilt = false
	r.Print(&b, "switchover")
	want := "failover of shard2: port 5002 promoted in 1.235s (timeline 3); old primary on port 5001 rebuilt as the synchronous standby\n" +
		"switchover of shard2: port 5002 promoted in 1.235s (timeline 3); old primary on port 5001 left stopped (reshard dev standby shard2 rebuilds it)\n"
	if b.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", b.String(), want)
	}
}
