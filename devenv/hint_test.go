package devenv

import "testing"

// add-node shard9 on a dev cluster of 5 shards suggests dev up --shards 9
// (main said 6, which makes shard6, not shard9).
func TestUpHint(t *testing.T) {
	for _, c := range []struct {
		name string
		have int
		want string
	}{
		{"shard9", 5, "reshard dev up --shards 9"},
		{"shard6", 5, "reshard dev up --shards 6"},
		{"shard2", 5, "reshard dev up --shards 6"},
		{"eu1", 5, "reshard dev up names its shards shard1..shardN, so add eu1 to the configuration by hand"},
		{"shard09", 5, "reshard dev up names its shards shard1..shardN, so add shard09 to the configuration by hand"},
	} {
		if got := UpHint(c.name, c.have); got != c.want {
			t.Errorf("UpHint(%s, %d) = %q, want %q", c.name, c.have, got, c.want)
		}
	}
}
