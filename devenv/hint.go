package devenv

import (
	"fmt"
	"strconv"
	"strings"
)

// UpHint is the local command that adds shard name to a dev cluster of
// have shards: dev up names its shards shard1..shardN, so shard9 needs
// --shards 9, not one more than there are; a name it would never make has
// no such command.
func UpHint(name string, have int) string {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "shard"))
	if !strings.HasPrefix(name, "shard") || err != nil || n < 1 || strconv.Itoa(n) != strings.TrimPrefix(name, "shard") {
		return fmt.Sprintf("reshard dev up names its shards shard1..shardN, so add %s to the configuration by hand", name)
	}
	return fmt.Sprintf("reshard dev up --shards %d", max(n, have+1))
}
