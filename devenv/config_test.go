package devenv

import (
	"maps"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestShardEntryWithStandby: a shard's entry is a DSN or dsn: and
// standby:, both forms in one file; a file written back keeps them.
func TestShardEntryWithStandby(t *testing.T) {
	const in = `control: postgres://c/control
shards:
  shard1: postgres://p1/app
  shard2:
    dsn: postgres://p2/app
    standby: postgres://s2/app
temporal:
  address: 127.0.0.1:7233
`
	var wc WorkerConfig
	if err := yaml.Unmarshal([]byte(in), &wc); err != nil {
		t.Fatal(err)
	}
	wantShards := map[string]string{"shard1": "postgres://p1/app", "shard2": "postgres://p2/app"}
	wantStandbys := map[string]string{"shard2": "postgres://s2/app"}
	if !maps.Equal(wc.Shards, wantShards) || !maps.Equal(wc.Standbys, wantStandbys) || wc.Control != "postgres://c/control" || wc.Temporal.Address != "127.0.0.1:7233" {
		t.Fatalf("read %+v", wc)
	}
	out, err := yaml.Marshal(wc)
	if err != nil {
		t.Fatal(err)
	}
	var again WorkerConfig
	if err := yaml.Unmarshal(out, &again); err != nil {
		t.Fatalf("read back %s: %v", out, err)
	}
	if !maps.Equal(again.Shards, wantShards) || !maps.Equal(again.Standbys, wantStandbys) || again.Control != wc.Control {
		t.Fatalf("written and read back %+v from\n%s", again, out)
	}
	plain, err := yaml.Marshal(WorkerConfig{Shards: wantShards})
	if err != nil || !strings.Contains(string(plain), "shard2: postgres://p2/app") {
		t.Fatalf("without standbys: %s, %v", plain, err)
	}
	if err := yaml.Unmarshal([]byte("shards:\n  shard1:\n    dsn: [1, 2]\n"), &wc); err == nil || !strings.Contains(err.Error(), "shards.shard1") {
		t.Fatalf("a malformed entry: %v, want an error naming shards.shard1", err)
	}
}
