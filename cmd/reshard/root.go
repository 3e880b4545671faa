package main

import (
	"errors"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/workflows"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	stateDir string // the local dev cluster's state directory
	logLevel string
	logger   *slog.Logger
}

// usageError marks bad input: exit code 2, nothing was changed.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// exitCode maps an error to the process exit code scripts can rely on:
// 1 failure, 2 bad input (nothing changed), 3 rejected by the workflow (an
// error with an ExitCode method says its own code).
func exitCode(err error) int {
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func newRootCmd() *cobra.Command {
	opts := &globalOptions{}
	root := &cobra.Command{
		Use:           "reshard",
		Short:         "Online resharding of PostgreSQL by token ranges",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(opts.logLevel)); err != nil {
				return usageError{err}
			}
			opts.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			if f := cmd.Flag("state-dir"); f != nil && !f.Changed && os.Getenv("RESHARD_STATE_DIR") != "" {
				opts.stateDir = os.Getenv("RESHARD_STATE_DIR")
			}
			return nil
		},
	}
	// No flag takes its default from the environment: --help prints
	// defaults, and the environment may hold secrets. It is read when the
	// command runs.
	root.PersistentFlags().StringVar(&opts.stateDir, "state-dir", ".reshard/dev", "state directory of the local dev cluster ($RESHARD_STATE_DIR)")
	root.PersistentFlags().StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(
		// one line per verb: newXCmd(opts)
		newDevCmd(opts),
		newVerifyCmd(opts),
		newRingCmd(opts),
		newTopologyCmd(opts),
		newCheckCmd(opts),
		newInitCmd(opts),
		newKeyspaceCmd(opts),
		newSchemaCmd(opts),
		newLoadCmd(opts),
		newPlanCmd(opts),
		newMigrationCmd(opts, workflows.KindSplit, false),
		newMigrationCmd(opts, workflows.KindAddNode, false),
		newMigrationCmd(opts, workflows.KindRemoveNode, false),
		newMigrationCmd(opts, workflows.KindMove, false),
		newMigrationCmd(opts, workflows.KindRebalance, false),
		newStatusCmd(opts),
		newListCmd(opts),
		newThrottleCmd(opts),
		newRecoverCmd(opts),
	)
	root.AddCommand(newActionCmds(opts)...) // pause, resume, approve, rollback, complete, reverify
	root.AddCommand(
		newWorkerCmd(opts),
		newDemoCmd(opts),
	)
	addExamples(root, nil)
	addCompletions(root, opts, nil)
	return root
}

// flagOrEnv is a flag's value, or the environment variable key when the
// flag is empty: for flags that may hold a secret, whose default must not
// come from the environment (--help prints defaults).
func flagOrEnv(v, key string) string {
	if v != "" {
		return v
	}
	return os.Getenv(key)
}
