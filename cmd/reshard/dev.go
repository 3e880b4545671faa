package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/devenv"
)

func newDevCmd(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Local cluster: a control server, N shard servers and a Temporal dev server",
		Long: `Local cluster for development and the demo: a control PostgreSQL server,
N shard servers (shard1..shardN) with wal_level=logical, and a Temporal dev
server, all under --state-dir. The processes outlive this command and stop
with "reshard dev down".`,
	}
	// Bad flags and arguments are usage errors (exit 2), as everywhere.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(newDevUpCmd(opts), newDevStatusCmd(opts), newDevDownCmd(opts), newDevDestroyCmd(opts), newDevPsqlCmd(opts), newDevStandbyCmd(opts), newDevFailoverCmd(opts))
	return cmd
}

func newDevUpCmd(opts *globalOptions) *cobra.Command {
	var shards int
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start the local cluster (idempotent: restarts what crashed, adds shards)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := devenv.Options{StateDir: opts.stateDir, Logger: opts.logger}
			if cmd.Flags().Changed("shards") {
				if shards < 1 {
					return usageError{fmt.Errorf("--shards %d: a cluster needs at least 1 shard (--shards 1 or more)", shards)}
				}
				o.Shards = shards
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			c, err := devenv.Up(ctx, o)
			if errors.Is(err, devenv.ErrShrink) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			c.Print(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().IntVar(&shards, "shards", devenv.DefaultShards, "number of shard servers; an existing cluster keeps its count unless this is larger")
	return cmd
}

func newDevStatusCmd(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show each server (running, port, wal_level) and Temporal; exit 1 unless all is up",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			st, err := devenv.GetStatus(ctx, opts.stateDir)
			if err != nil {
				return err
			}
			st.Print(cmd.OutOrStdout())
			if !st.Healthy() {
				return errors.New("the local cluster is not fully up: reshard dev up restarts what is down")
			}
			return nil
		},
	}
}

func newDevDownCmd(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every server and the Temporal dev server (data and ports are kept)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			err := devenv.Down(ctx, opts.stateDir)
			if errors.Is(err, devenv.ErrNoCluster) {
				fmt.Fprintf(cmd.OutOrStdout(), "%v: nothing to stop\n", err)
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "local cluster stopped; reshard dev up starts it again")
			return nil
		},
	}
}

func newDevDestroyCmd(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "destroy",
		Short: "Stop the local cluster and remove its state directory (all data)",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			dir, err := devenv.AbsStateDir(opts.stateDir)
			if err != nil {
				return usageError{err}
			}
			if err := devenv.Destroy(ctx, dir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", dir)
			return nil
		},
	}
}

func newDevPsqlCmd(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "psql <name> [-- psql arguments]",
		Short: "Run psql on a server's reshard database (control, shard1, ...)",
		Args:  usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := devenv.Load(opts.stateDir)
			if err != nil {
				return err
			}
			path, argv, env, err := c.PsqlCommand(args[0], args[1:])
			if errors.Is(err, devenv.ErrNoServer) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			// Replace this process: psql gets the terminal, and the password
			// travels only in its environment.
			return syscall.Exec(path, argv, env)
		},
	}
}

// usageArgs makes an argument check's complaint a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{fmt.Errorf("%w (see reshard %s --help)", err, strings.TrimPrefix(cmd.CommandPath(), "reshard "))}
		}
		return nil
	}
}
