package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// examples are the --help examples of the commands that do not set their
// own, by command path. Ids are what reshard list prints; every command
// that takes one also takes its workflow id, reshard-<id>. A test parses
// every line against the command's flags.
var examples = map[string]string{
	"": `  reshard dev up --shards 4
  reshard init --table users:id --table orders:user_id
  reshard add-node shard5
  reshard status --watch`,
	"add-node": `  reshard add-node shard5
  reshard add-node shard5 --rows-per-sec 20000 --require-approval --id add-shard5
  reshard add-node shard5 --max-source-latency-increase 10 --max-replica-lag 2s --probe-query 'SELECT 1 FROM users WHERE id = 1'`,
	"split":       `  reshard split shard1 --into shard5 --grace 30m`,
	"remove-node": `  reshard remove-node shard4 --rows-per-sec 10000`,
	"move": `  reshard move --range -4611686018427387904:0 --to shard3
  reshard move --range '(-4611686018427387904,0]' --to shard3`,
	"plan add-node":    `  reshard plan add-node shard5 --json`,
	"plan split":       `  reshard plan split shard1 --into shard5`,
	"plan remove-node": `  reshard plan remove-node shard4`,
	"plan move":        `  reshard plan move --range '(-4611686018427387904,0]' --to shard3`,
	"plan rebalance": `  reshard plan rebalance --add shard5,shard6,shard7,shard8
  reshard plan rebalance --remove shard4 --weight shard1=2 --json`,
	"rebalance": `  reshard rebalance --add shard5,shard6
  reshard rebalance --add shard6 --remove shard2 --rows-per-sec 20000`,
	"status": `  reshard status
  reshard status add-k3f9xq --watch
  reshard status reshard-add-k3f9xq --json`,
	"list": `  reshard list --limit 5 --json`,
	"pause": `  reshard pause add-k3f9xq
  reshard pause reshard-add-k3f9xq --request-id p1 --timeout 1m`,
	"resume":   `  reshard resume add-k3f9xq`,
	"approve":  `  reshard approve add-k3f9xq --request-id a1`,
	"rollback": `  reshard rollback add-k3f9xq --timeout 2m`,
	"complete": `  reshard complete add-k3f9xq`,
	"reverify": `  reshard reverify add-k3f9xq`,
	"throttle": `  reshard throttle add-k3f9xq --rows-per-sec 5000
  reshard throttle add-k3f9xq --rows-per-sec 0 --bytes-per-sec 0
  reshard throttle add-k3f9xq --rows-per-sec 5000 --copy-chunk-rows 1000
  reshard throttle add-k3f9xq --max-source-latency-increase 10 --max-replica-lag 2s
  reshard throttle add-k3f9xq --max-source-latency-increase 0   # adaptive throttle off`,
	"check":  `  reshard check placement --keyspace default`,
	"schema": `  reshard schema sync shard5 --dry-run`,
	"check placement": `  reshard check placement
  reshard check placement --keyspace default --json`,
	"worker":           `  reshard worker --config /etc/reshard/reshard.yaml --listen 0.0.0.0:9464`,
	"demo":             `  reshard demo --users 100000 --rows-per-sec 20000 --keep`,
	"dev":              `  reshard dev up --shards 4`,
	"dev up":           `  reshard dev up --shards 6`,
	"dev down":         `  reshard dev down`,
	"dev destroy":      `  reshard dev destroy`,
	"dev status":       `  reshard dev status`,
	"dev psql":         `  reshard dev psql shard1 -- -c 'select count(*) from users'`,
	"keyspace":         `  reshard keyspace show`,
	"ring":             `  reshard ring show --ranges`,
	"ring token":       `  reshard ring token --type bigint 42 43`,
	"ring plan":        `  reshard ring plan --shards shard1,shard2,shard3 --add shard4 --json`,
	"ring simulate":    `  reshard ring simulate --shards 4 --add 1 --keys 100000`,
	"ring show":        `  reshard ring show --ranges --keyspace default`,
	"topology":         `  reshard topology show`,
	"topology show":    `  reshard topology show --version 3 --json`,
	"topology history": `  reshard topology history --limit 5`,
}

// addExamples sets the examples of the commands under c that have none.
func addExamples(c *cobra.Command, path []string) {
	if c.Example == "" {
		c.Example = examples[strings.Join(path, " ")]
	}
	for _, sub := range c.Commands() {
		addExamples(sub, append(append([]string{}, path...), sub.Name()))
	}
}
