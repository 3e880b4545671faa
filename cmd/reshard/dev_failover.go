package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/devenv"
)

func newDevStandbyCmd(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "standby <shard>",
		Short: "Give a shard a synchronous streaming standby (pg_basebackup -R); reshard.yaml then lists both servers",
		Example: `  reshard dev standby shard2
  # then: reshard dev failover shard2`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			c, err := devenv.AddStandby(ctx, opts.stateDir, args[0], opts.logger)
			if err != nil {
				return devUsage(err)
			}
			c.PrintStandby(cmd.OutOrStdout(), args[0])
			return nil
		},
	}
}

func newDevFailoverCmd(opts *globalOptions) *cobra.Command {
	var o devenv.FailoverOptions
	cmd := &cobra.Command{
		Use:   "failover <shard>",
		Short: "Promote a shard's standby: kill the primary (or stop it cleanly with --switchover), promote, rebuild the old primary as the standby",
		Example: `  reshard dev failover shard2
  reshard dev failover shard2 --switchover
  reshard dev failover shard2 --no-rebuild`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			o.Logger = opts.logger
			r, err := devenv.Failover(ctx, opts.stateDir, args[0], o)
			if err != nil {
				return devUsage(err)
			}
			kind := "failover"
			if o.Switchover {
				kind = "switchover"
			}
			r.Print(cmd.OutOrStdout(), kind)
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.Switchover, "switchover", false, "stop the primary cleanly (pg_ctl stop -m fast) before the promotion, instead of killing it")
	cmd.Flags().BoolVar(&o.NoRebuild, "no-rebuild", false, "leave the old primary stopped instead of rebuilding it as the standby")
	return cmd
}

// devUsage makes the errors that name what to fix in the command usage errors.
func devUsage(err error) error {
	if errors.Is(err, devenv.ErrNoStandby) || errors.Is(err, devenv.ErrNoShard) {
		return usageError{err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (the servers' logs are beside their data directories)", err)
	}
	return err
}
