package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// withCapacity appends a capacity section to the cluster's reshard.yaml.
func (c *testCluster) withCapacity(t *testing.T, section string) {
	t.Helper()
	b, err := os.ReadFile(c.config)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Split(string(b), "capacity:")[0] + "capacity:\n" + section)
	if err := os.WriteFile(c.config, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// plan predicts the cost of a migration from a probe of the servers, and
// refuses (exit 2, nothing started) one whose target would outgrow the
// disk_bytes reshard.yaml gives it, naming the shard, the figures and the
// fix; one that fits passes and prints the prediction.
func TestPlanRefusesWhatCannotFit(t *testing.T) {
	c := newTestCluster(t, false)
	if out, code := c.run(t, "init", "--shards", "shard1,shard2"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, out)
	}
	c.withCapacity(t, "  shard3:\n    disk_bytes: 16384\n")
	out, code := c.run(t, "plan", "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--wal-window", "200ms")
	if code != 2 || !strings.Contains(out, "[capacity/disk] shard3: as a target it grows by") || !strings.Contains(out, "gives it 16.0 KiB") ||
		!strings.Contains(out, "fix: free space on shard3 and raise its disk_bytes") {
		t.Fatalf("plan onto a target without the disk: exit %d\n%s", code, out)
	}
	if n := c.slots(t); n != 0 {
		t.Fatalf("%d slots after a refused plan", n)
	}
	c.withCapacity(t, "  shard3:\n    disk_bytes: 1073741824\n")
	out, code = c.run(t, "plan", "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--wal-window", "200ms")
	if code != 0 || !strings.Contains(out, "capacity (predicted from a probe of the servers") || !strings.Contains(out, "SLOT WAL") ||
		!strings.Contains(out, "copied as the copy does") {
		t.Fatalf("plan onto a target with the disk: exit %d\n%s", code, out)
	}
	t.Log(out)
	out, code = c.run(t, "plan", "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id", "--wal-window", "200ms", "--json")
	var rep planReport
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Capacity == nil || len(rep.Capacity.Moves) != len(rep.Pairs) {
		t.Fatalf("plan --json: exit %d, %v\n%s", code, err, out)
	}
	for _, m := range rep.Capacity.Moves {
		if m.Copy <= 0 || m.Verify <= 0 || m.TargetGrowth <= 0 {
			t.Errorf("move %s not predicted: %+v", m.ID, m)
		}
	}
	c.withCapacity(t, "  shard9:\n    disk_bytes: 1\n")
	if out, code := c.run(t, "plan", "add-node", "shard3", "--table", "users:id", "--table", "orders:user_id"); code != 2 || !strings.Contains(out, "capacity.shard9: no such shard") {
		t.Fatalf("a capacity entry for an unknown shard: exit %d\n%s", code, out)
	}
}
