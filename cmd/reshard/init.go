package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/keyspace/register"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/topoview"
)

func newInitCmd(opts *globalOptions) *cobra.Command {
	var (
		cf       configFlags
		vnodes   int
		tokens   string
		shards   []string
		tables   []string
		keyspace string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "init [--shards a,b,c] [--vnodes 16] [--tokens balanced] [--table t:key...]",
		Short: "Set up the control database: schema, shard registry, topology v1, keyspace",
		Long: `Creates (or upgrades) the topology schema in the control database of the
configuration, and, when no topology exists yet, registers the ring's shards
as active and publishes version 1: a ring over --shards (default: every
configured shard). Configured shards left out stay unregistered: they are the
shards reshard add-node or split can bring in later.

With --table, registers the sharded tables in the keyspace (as reshard
keyspace add-table does: checked on every shard first) and fences every shard
where it owns nothing. Every migration then moves every registered table. The
tables are checked against the ring before it is published: a refused init
publishes nothing.

Idempotent: with a topology already published it only checks the schema and
prints the current version (and registers --table). Exit codes: 0 ok, 1
failure, 2 bad input.`,
		Example: `  reshard dev up --shards 4 && reshard init --table users:id --table orders:user_id
  reshard init --shards shard1,shard2,shard3 --table users:id   # keep shard4 for reshard add-node shard4`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if vnodes < 1 || vnodes > 4096 {
				return usageError{fmt.Errorf("--vnodes %d: want 1 to 4096", vnodes)}
			}
			alloc, err := ring.ParseAllocation(tokens)
			if err != nil {
				return usageError{fmt.Errorf("--tokens: %w", err)}
			}
			cfg, err := cf.load(opts)
			if err != nil {
				return err
			}
			members, err := register.Members(cfg.Shards, cfg.Path, shards)
			if err != nil {
				return usageError{err}
			}
			var spec tableset.Spec
			if len(tables) > 0 {
				if spec, err = parseTableSpec(tables, keyspace); err != nil {
					return usageError{err}
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			store, pool, err := cfg.openStore(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := topology.Migrate(ctx, pool); err != nil {
				return err
			}
			if !topology.ValidKeyspaceName(keyspace) {
				return usageError{fmt.Errorf("--keyspace %q: use lower-case letters, digits and '_', starting with a letter", keyspace)}
			}
			store = store.In(keyspace)
			res, err := register.Init(ctx, store, pool, cfg.openShardPools, register.InitOptions{
				Keyspace: keyspace, DSNs: cfg.Shards, Members: members, Ring: ring.Options{VNodes: vnodes, Tokens: alloc}, Tables: spec})
			if err != nil {
				return registerErr(err)
			}
			t, published, ks := res.Topology, res.Published, res.Keyspace
			out := cmd.OutOrStdout()
			if asJSON {
				return topoWriteJSON(out, topoview.InitOf(t, published, cfg.ShardNames(), redactDSN(cfg.Control), ks))
			}
			topoview.PrintInit(out, t, published, cfg.ShardNames(), redactDSN(cfg.Control))
			if ks != nil {
				fmt.Fprintln(out)
				topoview.PrintKeyspace(out, *ks)
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().IntVar(&vnodes, "vnodes", 16, "vnodes per shard of the first ring")
	cmd.Flags().StringVar(&tokens, "tokens", "balanced", "token allocation of the first ring: balanced or hash")
	cmd.Flags().StringSliceVar(&shards, "shards", nil, "shards of the first ring (default: every configured shard)")
	cmd.Flags().StringArrayVar(&tables, "table", nil, "a sharded table and its shard-key column, [schema.]table:key (repeatable): registered in the keyspace")
	cmd.Flags().StringVar(&keyspace, "keyspace", topology.DefaultKeyspace, "the keyspace: its first ring (topology v1) and the tables --table registers in it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
