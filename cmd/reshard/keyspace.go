package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/keyspace/register"
	"github.com/reshard/reshard/tableset"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/topoview"
)

func newKeyspaceCmd(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keyspace",
		Short: "What is sharded: the registered tables that every migration moves",
		Long: `A keyspace is a named group of tables sharded by one key type
(users.id, orders.user_id), registered in the control database with each
table's key column, with its own ring and topology versions (reshard init
--keyspace creates one). Every migration moves every table of its keyspace:
a table left out would keep rows on shards that no longer own them. Every
shard of the keyspace is fenced (its writes refused) where it owns nothing.`,
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(newKeyspaceShowCmd(opts), newKeyspaceAddTableCmd(opts))
	return cmd
}

func newKeyspaceShowCmd(opts *globalOptions) *cobra.Command {
	var (
		cf     configFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "show",
		Short:   "Print the keyspace and its tables",
		Example: `  reshard keyspace show --json`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withControlDB(cmd, opts, &cf, time.Minute, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				store := ctl.Store
				all, err := store.Keyspaces(ctx)
				if err != nil {
					return controlErr(err)
				}
				if asJSON {
					return topoWriteJSON(cmd.OutOrStdout(), topoNonNil(all))
				}
				if len(all) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "no keyspace registered: reshard init --table t:key (or reshard keyspace add-table t:key)")
					return nil
				}
				for _, k := range all {
					topoview.PrintKeyspace(cmd.OutOrStdout(), k)
				}
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newKeyspaceAddTableCmd(opts *globalOptions) *cobra.Command {
	var (
		cf   configFlags
		name string
	)
	cmd := &cobra.Command{
		Use:   "add-table [schema.]table:key...",
		Short: "Register tables in the keyspace (checked on every shard first)",
		Long: `Registers tables with their shard-key columns in the keyspace, creating it
when the cluster has none. Before anything is written, every shard of the
ring is checked: each table exists with a primary key and the key column, all
keys share the keyspace's key type, a key is NOT NULL and (text) of a
deterministic collation, no table is partitioned, and no shard holds rows of the table in
token ranges it does not own (a table loaded before it was registered may;
the error names the shard, the count and sample keys). Then every shard is
fenced where it owns nothing, for the new tables too.

Idempotent. Refused while a migration runs: it moves the tables it started
with. Exit codes: 0 ok, 1 failure, 2 bad input (nothing changed).`,
		Example: `  reshard keyspace add-table invoices:customer_id
  reshard keyspace add-table billing.invoices:customer_id billing.payments:customer_id`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := parseTableSpec(args, name)
			if err != nil {
				return usageError{err}
			}
			return withControlDB(cmd, opts, &cf, 10*time.Minute, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				store := ctl.Store
				if err := topology.Migrate(ctx, ctl.Pool); err != nil {
					return err
				}
				if name == "" { // the only keyspace, or the default one
					name = topology.DefaultKeyspace
					if k, err := store.ResolveKeyspace(ctx, ""); err == nil {
						name = k.Name
					}
				}
				k, err := registerKeyspace(ctx, cfg, fence.Control{Pool: ctl.Pool, Store: store.In(name)}, name, spec)
				if err != nil {
					return err
				}
				topoview.PrintKeyspace(cmd.OutOrStdout(), k)
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().StringVar(&name, "keyspace", "", "the keyspace (default: the cluster's only one, or "+topology.DefaultKeyspace+"); its ring must exist (reshard init --keyspace)")
	return cmd
}

// registerKeyspace checks spec on every shard of the keyspace's current
// topology (ctl's store is In the keyspace), then registers it and fences
// every shard (register.Tables).
func registerKeyspace(ctx context.Context, cfg *clusterConfig, ctl fence.Control, name string, spec tableset.Spec) (topology.Keyspace, error) {
	k, err := register.Tables(ctx, ctl.Store, ctl.Pool, cfg.openShardPools, name, spec)
	return k, registerErr(err)
}

// registerErr makes register's refusals usage errors.
func registerErr(err error) error {
	if errors.As(err, new(*pgerr.InputError)) {
		return usageError{err}
	}
	return controlErr(err)
}

// migrationKeyspace resolves the keyspace a migration changes and gives
// the migration its tables (register.MigrationTables).
func migrationKeyspace(ctx context.Context, store *topology.Store, name string, given tableset.Spec) (string, tableset.Spec, bool, error) {
	ks, spec, reg, err := register.MigrationTables(ctx, store, name, given)
	return ks, spec, reg, registerErr(err)
}
