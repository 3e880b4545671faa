package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/reshard/reshard/control"
	"github.com/spf13/cobra"
)

// addCompletions wires dynamic shell completion (reshard completion
// bash|zsh|fish): migration ids from Temporal, shard names from the
// configuration, keyspaces from the control database. A completion that
// cannot reach them offers nothing; it never prints an error into the shell.
func addCompletions(c *cobra.Command, opts *globalOptions, path []string) {
	switch p := strings.Join(path, " "); p {
	case "pause", "resume", "approve", "rollback", "complete", "reverify", "throttle":
		c.ValidArgsFunction = firstArg(func(cmd *cobra.Command) []string { return completeMigrations(cmd, opts, true) })
	case "status", "recover": // recover: the ended ones too
		c.ValidArgsFunction = firstArg(func(cmd *cobra.Command) []string { return completeMigrations(cmd, opts, false) })
	case "add-node", "split", "remove-node", "plan add-node", "plan split", "plan remove-node":
		c.ValidArgsFunction = firstArg(func(cmd *cobra.Command) []string { return completeShards(cmd, opts) })
	}
	for _, flag := range []string{"into", "to"} {
		if c.LocalFlags().Lookup(flag) != nil {
			_ = c.RegisterFlagCompletionFunc(flag, func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
				return completeShards(cmd, opts), cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
	if c.LocalFlags().Lookup("keyspace") != nil && c.LocalFlags().Lookup("config") != nil {
		_ = c.RegisterFlagCompletionFunc("keyspace", func(cmd *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
			return completeKeyspaces(cmd, opts), cobra.ShellCompDirectiveNoFileComp
		})
	}
	for _, sub := range c.Commands() {
		addCompletions(sub, opts, append(append([]string{}, path...), sub.Name()))
	}
}

// firstArg completes the first positional argument only.
func firstArg(f func(cmd *cobra.Command) []string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd), cobra.ShellCompDirectiveNoFileComp
	}
}

// completionConfig loads the configuration the command would use, with a
// silent logger (the shell reads stdout).
func completionConfig(cmd *cobra.Command, opts *globalOptions) (*clusterConfig, *globalOptions, bool) {
	quiet := *opts
	quiet.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if f := cmd.Flag("state-dir"); f != nil && !f.Changed && os.Getenv("RESHARD_STATE_DIR") != "" {
		quiet.stateDir = os.Getenv("RESHARD_STATE_DIR") // PersistentPreRunE does not run for completions
	}
	var cf configFlags
	if f := cmd.Flag("config"); f != nil {
		cf.path = f.Value.String()
	}
	cfg, err := cf.load(&quiet)
	return cfg, &quiet, err == nil
}

// completeMigrations lists migration ids, newest first: running ones only
// for the operator actions, the recent ones for status.
func completeMigrations(cmd *cobra.Command, opts *globalOptions, running bool) []string {
	cfg, quiet, ok := completionConfig(cmd, opts)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
	defer cancel()
	tc, err := cfg.dialTemporal(ctx, quiet)
	if err != nil {
		return nil
	}
	defer tc.Close()
	query := control.AllMigrations
	if running {
		query = control.RunningMigrations
	}
	rows, err := control.List(ctx, tc, query, 50)
	if err != nil {
		return nil
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID+"\t"+r.Status)
	}
	return ids
}

// completeShards lists the configured shards.
func completeShards(cmd *cobra.Command, opts *globalOptions) []string {
	cfg, _, ok := completionConfig(cmd, opts)
	if !ok {
		return nil
	}
	return cfg.ShardNames()
}

// completeKeyspaces lists the keyspaces of the control database.
func completeKeyspaces(cmd *cobra.Command, opts *globalOptions) []string {
	cfg, _, ok := completionConfig(cmd, opts)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
	defer cancel()
	store, pool, err := cfg.openStore(ctx)
	if err != nil {
		return nil
	}
	defer pool.Close()
	ks, err := store.Keyspaces(ctx)
	if err != nil {
		return nil
	}
	var names []string
	for _, k := range ks {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	return names
}
