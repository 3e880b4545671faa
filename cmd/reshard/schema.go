package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/fence"
	"github.com/reshard/reshard/shardschema"
	"github.com/reshard/reshard/tableset"
)

func newSchemaCmd(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Give a shard the keyspace's tables (schema sync), change every shard's (schema apply)",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(newSchemaSyncCmd(opts), newSchemaApplyCmd(opts))
	return cmd
}

func newSchemaSyncCmd(opts *globalOptions) *cobra.Command {
	var (
		cf             configFlags
		keyspace, from string
		dryRun, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "sync <target-shard> [--from <shard>] [--keyspace <k>] [--dry-run]",
		Short: "Create the keyspace's tables, indexes, constraints, sequences and token indexes on a shard",
		Long: `Gives a shard (a new one, before add-node or split) the tables of a keyspace as they
are on a source shard: each table the target lacks is created from the source's
catalog (pg_dump --schema-only of those tables: columns, defaults, constraints,
indexes, the sequences they own, the application's triggers; reshard's own
triggers, which run functions of schema reshard, left out) as the role that owns
it on the source, and every table gets its token index. A table the target
already has must match the source's (columns, types, primary key): a difference
is refused, naming it, with nothing changed (exit 2); so is a type the tables use
that the target lacks (an enum, a domain, an extension's type: the message says
what to create) and a partitioned table. --dry-run lists what would be created.

The source defaults to the first shard (by name) of the keyspace's ring.
pg_dump comes from the PostgreSQL binaries reshard finds ($PG_BIN, beside pg_ctl
on PATH, PATH, /usr/lib/postgresql/*/bin).

Exit codes: 0 done (or nothing to do), 1 failure, 2 bad input or a conflicting
definition on the target (nothing changed).`,
		Example: `  reshard schema sync shard5 --dry-run
  reshard schema sync shard5 --from shard1 --keyspace default`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			target := args[0]
			return withControlDB(cmd, opts, &cf, 30*time.Minute, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				k, from, err := shardschema.Resolve(ctx, ctl.Store, keyspace, from, target)
				if err != nil {
					return registerErr(err)
				}
				for _, s := range []string{from, target} {
					if _, ok := cfg.Shards[s]; !ok {
						return usageError{fmt.Errorf("shard %s is not in the configuration %s: add it (name: DSN) first", s, cfg.Path)}
					}
				}
				if from == target {
					return usageError{fmt.Errorf("--from %s is the target itself", from)}
				}
				src, err := cfg.connect(ctx, "shard "+from, cfg.Shards[from])
				if err != nil {
					return err
				}
				defer src.Close()
				dst, err := cfg.connect(ctx, "shard "+target, cfg.Shards[target])
				if err != nil {
					return err
				}
				defer dst.Close()
				plan, err := shardschema.Sync(ctx, src, dst, shardschema.Options{Spec: k.Spec(), From: from, Target: target, DryRun: dryRun, PGDump: devenv.FindPGDump})
				if err != nil {
					return inputErr(err)
				}
				return shardschema.SyncReport{Keyspace: k.Name, From: from, Target: target, DryRun: dryRun, Tables: plan}.Print(cmd.OutOrStdout(), asJSON)
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().StringVar(&keyspace, "keyspace", "", "keyspace whose tables to sync (default: the only one)")
	cmd.Flags().StringVar(&from, "from", "", "shard to copy the definitions from (default: the first of the keyspace's ring)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be created; change nothing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newSchemaApplyCmd(opts *globalOptions) *cobra.Command {
	var (
		cf             configFlags
		keyspace, file string
		lockTimeout    time.Duration
		budget         time.Duration
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   `apply [--keyspace <k>] ("ALTER TABLE ..." | --file <f>)`,
		Short: "Apply a schema change to every shard of a keyspace, the targets of running moves included",
		Long: `Runs ALTER TABLE and CREATE INDEX statements on every shard of a keyspace: the
shards of its current ring and the sources and targets of its running moves.
A running move adapts to the change (the copy, the appliers and verify match
columns by name), so it need not be stopped.

Order: an additive change (a column added, a type changed, a default or NOT
NULL changed, an index) reaches the targets of running moves first, so an
applier never receives a column its target lacks; a dropped column reaches
them last. Each shard runs each statement (one ALTER TABLE action at a time)
with a short lock_timeout (--lock-timeout, default 50ms), so the application
never queues behind a change waiting for a long transaction, and retries with a
jittered backoff for up to --budget. CREATE INDEX runs CONCURRENTLY (and IF NOT
EXISTS): its lock lets writes through, so it does not use the short timeout; an
invalid index left by a failed build is dropped and built again.

Refused, with the reason and nothing changed (exit 2): a change of a shard-key
or primary-key column (drop, type, DROP NOT NULL), a primary key or any
constraint, a rename, SET SCHEMA, REPLICA IDENTITY, a new column whose existing
rows would get each shard's own values (serial, identity, a default that is not
a constant), a unique index, an unnamed index, a table outside the keyspace,
and any statement other than ALTER TABLE and CREATE INDEX.

The report says, per shard and statement: applied, already there, failed (with
the reason; the shards after it are not attempted), or not attempted. Running
the same change again is safe.

Exit codes: 0 applied everywhere (or already there), 1 a shard failed, 2
refused or bad input (nothing changed).`,
		Example: `  reshard schema apply --keyspace default "ALTER TABLE users ADD COLUMN nickname text"
  reshard schema apply "CREATE INDEX orders_created ON orders (created_at)"
  reshard schema apply --keyspace default --file migrations/0042.sql --json`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			script, err := shardschema.Script(args, file, os.Stdin)
			if err != nil {
				return usageError{err}
			}
			return withControlDB(cmd, opts, &cf, budget*4+10*time.Minute, func(ctx context.Context, cfg *clusterConfig, ctl fence.Control) error {
				store := ctl.Store
				k, err := store.ResolveKeyspace(ctx, keyspace)
				if err != nil {
					return usageError{err}
				}
				names, targets, err := shardschema.ApplyShards(ctx, store.In(k.Name))
				if err != nil {
					return controlErr(err)
				}
				var shards []tableset.DDLShard
				for _, n := range names {
					dsn, ok := cfg.Shards[n]
					if !ok {
						return usageError{fmt.Errorf("shard %s of keyspace %s is not in the configuration %s: add it (name: DSN) first; nothing was changed", n, k.Name, cfg.Path)}
					}
					p, err := cfg.connect(ctx, "shard "+n, dsn)
					if err != nil {
						return err
					}
					defer p.Close()
					shards = append(shards, tableset.DDLShard{Name: n, Pool: p, Target: targets[n]})
				}
				stmts, err := shardschema.Parse(ctx, script, k.Spec(), shards)
				if err != nil {
					return inputErr(err)
				}
				res, applyErr := tableset.ApplyDDL(ctx, stmts, shards, tableset.DDLOptions{LockTimeout: lockTimeout, Budget: budget})
				if err := shardschema.PrintApply(cmd.OutOrStdout(), k.Name, res, asJSON); err != nil {
					return err
				}
				if applyErr != nil {
					return fmt.Errorf("schema apply stopped: %w; the shards before it have the change: fix the cause and run the same command again", applyErr)
				}
				return nil
			})
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().StringVar(&keyspace, "keyspace", "", "keyspace whose shards to change (default: the only one)")
	cmd.Flags().StringVar(&file, "file", "", "read the statements from this file (- for standard input) instead of the argument")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", 50*time.Millisecond, "how long one attempt waits for a table's lock")
	cmd.Flags().DurationVar(&budget, "budget", time.Minute, "how long a shard keeps retrying a statement whose lock it cannot get")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
