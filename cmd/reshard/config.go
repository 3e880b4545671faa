package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/reshard/reshard/capacity"
	"github.com/reshard/reshard/control"
	"github.com/reshard/reshard/devenv"
	"github.com/reshard/reshard/internal/pgerr"
	"github.com/reshard/reshard/ring"
)

// PasswordEnvVar overrides every other password source of the config file.
const PasswordEnvVar = devenv.PasswordOverrideEnv

// clusterConfig is the validated configuration of the operator verbs (init,
// plan, split, add-node, remove-node, move, status, list and the operator
// actions): the same reshard.yaml the worker reads. DSNs are kept without a
// password; the password is only put into connection configs (connConfig),
// never into a string that could be printed.
type clusterConfig struct {
	Path    string
	Control string
	Shards  map[string]string
	// Standbys maps a shard to its streaming standby's DSN (--read-from
	// standby reads the copy and verify there).
	Standbys map[string]string
	Temporal devenv.TemporalConfig
	// Listen is worker.listen: the worker's /metrics address when its
	// --listen is not given ("" : the flag's default).
	Listen string
	// Capacity is what each shard can spare (the file's capacity section).
	Capacity map[string]capacity.Budget
	password string
}

// inputErr makes a package's refusal of the input (*pgerr.InputError,
// *ring.InputError) a usage error (exit 2); other errors pass unchanged.
func inputErr(err error) error {
	if errors.As(err, new(*pgerr.InputError)) || errors.As(err, new(*ring.InputError)) {
		return usageError{err}
	}
	return err
}

// configFlags are the flags of the verbs that read the config file.
type configFlags struct {
	path string
}

func (f *configFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "config", "", "cluster configuration (default <state-dir>/reshard.yaml, written by reshard dev up; $RESHARD_CONFIG)")
}

// file is --config, else $RESHARD_CONFIG ("": the state directory's).
func (f *configFlags) file() string { return flagOrEnv(f.path, "RESHARD_CONFIG") }

// load reads and validates the configuration before anything runs.
func (f *configFlags) load(opts *globalOptions) (*clusterConfig, error) {
	path := f.file()
	if path == "" {
		path = filepath.Join(opts.stateDir, devenv.ConfigFile)
	}
	wc, err := devenv.ReadWorkerConfig(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, usageError{fmt.Errorf("no configuration at %s: start a local cluster with reshard dev up, or pass --config FILE", path)}
		}
		return nil, usageError{fmt.Errorf("configuration %s: %w", path, err)}
	}
	return validateConfig(path, wc)
}

// validateConfig checks every field and resolves the password: $RESHARD_PASSWORD,
// then the file's password_env, then its password_file. No source at all
// means no password (trust authentication, ~/.pgpass).
func validateConfig(path string, wc devenv.WorkerConfig) (*clusterConfig, error) {
	if err := wc.Check(); err != nil {
		return nil, usageError{fmt.Errorf("configuration %s: %w", path, err)}
	}
	c := &clusterConfig{Path: path, Control: wc.Control, Shards: maps.Clone(wc.Shards), Standbys: maps.Clone(wc.Standbys), Temporal: wc.Temporal, Listen: wc.Worker.Listen}
	for name, sc := range wc.Capacity {
		if c.Capacity == nil {
			c.Capacity = map[string]capacity.Budget{}
		}
		c.Capacity[name] = capacity.Budget{DiskBytes: sc.DiskBytes, WALBytes: sc.WALBudgetBytes}
	}
	if c.Temporal.Namespace == "" {
		c.Temporal.Namespace = devenv.Namespace
	}
	c.Temporal.UI = strings.TrimRight(c.Temporal.UI, "/")
	switch {
	case os.Getenv(PasswordEnvVar) != "":
		c.password = os.Getenv(PasswordEnvVar)
	case wc.PasswordEnv != "" && os.Getenv(wc.PasswordEnv) != "":
		c.password = os.Getenv(wc.PasswordEnv)
	case wc.PasswordFile != "":
		pw, err := wc.Password()
		if err != nil {
			return nil, usageError{fmt.Errorf("configuration %s: password_file: %v (or set %s)", path, err, PasswordEnvVar)}
		}
		c.password = pw
	}
	return c, nil
}

// validName: a shard name (devenv.ValidShardName).
func validName(s string) bool { return devenv.ValidShardName(s) }

// ShardNames lists the configured shards, sorted.
func (c *clusterConfig) ShardNames() []string {
	names := make([]string, 0, len(c.Shards))
	for n := range c.Shards {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// dialTemporal connects to the Temporal frontend of the configuration
// (control.Dial).
func (c *clusterConfig) dialTemporal(ctx context.Context, opts *globalOptions) (client.Client, error) {
	return control.Dial(ctx, c.Temporal.Address, c.Temporal.Namespace, opts.logger)
}

// uiLink is the Temporal UI page of a workflow (control.UILink).
func (c *clusterConfig) uiLink(workflowID, runID string) string {
	return control.UILink(c.Temporal.UI, c.Temporal.Namespace, workflowID, runID)
}

// runIDOf is the run id of a workflow's newest run (control.RunID).
func runIDOf(ctx context.Context, tc client.Client, workflowID string) string {
	return control.RunID(ctx, tc, workflowID)
}
