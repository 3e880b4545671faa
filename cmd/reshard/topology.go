package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/reshard/reshard/internal/pgsession"
	"github.com/reshard/reshard/topology"
	"github.com/reshard/reshard/topoview"
)

func newTopologyCmd(opts *globalOptions) *cobra.Command {
	var (
		controlDSN, keyspace string
		cf                   configFlags
	)
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "The versioned topology in the control database: show, history, skew",
		Long: `The topology is the one source of truth of which shard owns which token
range: an append-only list of versions in the control database (schema
reshard), each a ring plus the state of every range (stable, or migrating
from one shard to another). Routers follow it; only a move's cutover
publishes a new version.`,
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.PersistentFlags().StringVar(&controlDSN, "control-dsn", "", controlDSNHelp)
	cmd.PersistentFlags().StringVar(&keyspace, "keyspace", "", "the keyspace (default: "+topology.DefaultKeyspace+"; check: every keyspace)")
	ctl := controlFlags{opts: opts, dsn: &controlDSN, cf: &cf}
	show, history, skew := newTopologyShowCmd(ctl, &keyspace), newTopologyHistoryCmd(ctl, &keyspace), newTopologySkewCmd(ctl, &keyspace)
	for _, c := range []*cobra.Command{show, history, skew} {
		cf.register(c) // the same *configFlags: one of them runs
	}
	cmd.AddCommand(show, history, skew, newTopologyCheckCmd(opts, &keyspace))
	return cmd
}

const controlDSNHelp = "control database DSN (default: $RESHARD_CONTROL_DSN, else the control of reshard.yaml, as every command reads it)"

// controlFlags say where the control database is: --control-dsn, else
// $RESHARD_CONTROL_DSN (read when the command runs, never as a flag default
// that --help would print), else the configuration file, with its password
// sources, as every other command reads it.
type controlFlags struct {
	opts *globalOptions
	dsn  *string
	cf   *configFlags
}

// open connects to the control database and returns the store of keyspace.
func (c controlFlags) open(ctx context.Context, keyspace string) (*topology.Store, func(), error) {
	if dsn := *c.dsn; c.byDSN() {
		if dsn == "" {
			dsn = os.Getenv("RESHARD_CONTROL_DSN")
		}
		return openControl(ctx, dsn, keyspace)
	}
	cfg, err := c.cf.load(c.opts)
	if err != nil {
		return nil, nil, err
	}
	store, pool, err := cfg.openStore(ctx)
	if err != nil {
		return nil, nil, err
	}
	return store.In(keyspace), pool.Close, nil
}

// byDSN: the control database is named by --control-dsn or
// $RESHARD_CONTROL_DSN rather than by the configuration file.
func (c controlFlags) byDSN() bool {
	return *c.dsn != "" || c.cf.file() == "" && os.Getenv("RESHARD_CONTROL_DSN") != ""
}

// config is the configuration file's cluster when the control database is
// read through it (nil with --control-dsn or $RESHARD_CONTROL_DSN): its
// password sources reach the shards too.
func (c controlFlags) config() (*clusterConfig, error) {
	if c.byDSN() {
		return nil, nil
	}
	return c.cf.load(c.opts)
}

// loadTopology loads version (0: the current one).
func loadTopology(ctx context.Context, s *topology.Store, version int64) (topology.Topology, error) {
	if version > 0 {
		t, err := s.Load(ctx, version)
		return t, controlErr(err)
	}
	t, err := s.Current(ctx)
	return t, controlErr(err)
}

func newTopologyShowCmd(ctl controlFlags, keyspace *string) *cobra.Command {
	var (
		version int64
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show a topology version: shards, their share of the token space, migrating ranges",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version < 0 {
				return usageError{fmt.Errorf("--version %d: versions start at 1 (omit it for the current one)", version)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			store, closeFn, err := ctl.open(ctx, *keyspace)
			if err != nil {
				return err
			}
			defer closeFn()
			t, err := loadTopology(ctx, store, version)
			if err != nil {
				return err
			}
			shards, err := store.Shards(ctx)
			if err != nil {
				return controlErr(err)
			}
			if asJSON {
				return topoWriteJSON(cmd.OutOrStdout(), topoview.VersionOf(t, shards))
			}
			topoview.PrintTopology(cmd.OutOrStdout(), t, shards)
			return nil
		},
	}
	cmd.Flags().Int64Var(&version, "version", 0, "topology version to show (default: the current one)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// topoNonNil is s, or [] for nil (topoview.NonNil).
func topoNonNil[T any](s []T) []T { return topoview.NonNil(s) }

// topoDash is s, or "-" for nothing (topoview.Dash).
func topoDash(s string) string { return topoview.Dash(s) }

func topoWriteJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTopologyHistoryCmd(ctl controlFlags, keyspace *string) *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List topology versions, newest first",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usageError{fmt.Errorf("--limit %d: want 0 (all) or more", limit)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			store, closeFn, err := ctl.open(ctx, *keyspace)
			if err != nil {
				return err
			}
			defer closeFn()
			h, err := store.History(ctx, limit)
			if err != nil {
				return controlErr(err)
			}
			if asJSON {
				return topoWriteJSON(cmd.OutOrStdout(), topoNonNil(h))
			}
			return topoview.PrintHistory(cmd.OutOrStdout(), h)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "versions to list (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newTopologySkewCmd(ctl controlFlags, keyspace *string) *cobra.Command {
	var (
		req    topology.SkewRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "skew",
		Short: "Rows, bytes and write rates per shard and the hottest ranges, against max/median",
		Long: `Reads every shard of the current topology: row and byte estimates per
table (pg_class, pg_total_relation_size), rows per owned range (counted
through the token expression; large tables through TABLESAMPLE SYSTEM,
scaled), and write rates from two pg_stat_user_tables readings --interval
apart. Uniform keys are not uniform traffic: a shard can own its fair share
of the token space and still hold a hot key or take most of the writes.

The tables and the key type are the keyspace's, as registered (reshard
init, keyspace add-table); --table and --key-type choose others.

Shards are reached through the configuration's DSNs and password (password
file, password_env or $` + PasswordEnvVar + `), else through the connection
references in the registry with the password from the environment
(PGPASSWORD, PGPASSFILE, ~/.pgpass). --shard-dsn name=DSN overrides one
shard's connection.`,
		Example: `  reshard topology skew
  reshard topology skew --keyspace billing --interval 10s
  reshard topology skew --table users:id --table orders:user_id --key-type bigint`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			sopts, overrides, err := req.Options()
			if err != nil {
				return usageError{err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute+req.Interval)
			defer cancel()
			cfg, err := ctl.config()
			if err != nil {
				return err
			}
			store, closeFn, err := ctl.open(ctx, *keyspace)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := store.SkewDefaults(ctx, *keyspace, &sopts, req.KeyType != ""); err != nil {
				if errors.Is(err, topology.ErrNoKeyspace) {
					return usageError{fmt.Errorf("no tables to read: %v; or name them with --table [schema.]table:key", err)}
				}
				return usageError{controlErr(err)}
			}
			t, err := loadTopology(ctx, store, 0)
			if err != nil {
				return err
			}
			reg, err := store.Shards(ctx)
			if err != nil {
				return controlErr(err)
			}
			pools, closePools, err := shardPools(ctx, t, reg, overrides, cfg)
			if err != nil {
				return err
			}
			defer closePools()
			rep, err := topology.Skew(ctx, t, pools, sopts)
			if err != nil {
				return err
			}
			if asJSON {
				return topoWriteJSON(cmd.OutOrStdout(), rep)
			}
			topoview.PrintSkew(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&req.Tables, "table", nil, "table and shard-key column, [schema.]table:key (repeatable; all share one key type; default: the keyspace's registered tables)")
	f.StringArrayVar(&req.ShardDSNs, "shard-dsn", nil, "connection of one shard, name=DSN, instead of its registered reference (repeatable)")
	f.StringVar(&req.KeyType, "key-type", "", "shard-key type: bigint, integer, smallint, text, varchar or uuid (default: the keyspace's)")
	f.DurationVar(&req.Interval, "interval", 5*time.Second, "time between the two write-counter readings")
	f.IntVar(&req.Top, "top", 5, "hottest ranges to list")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// newRingShowCmd is "reshard ring show": the current ring from the control
// database. It belongs under the ring command, which wires it.
func newRingShowCmd(opts *globalOptions) *cobra.Command {
	var (
		controlDSN string
		cf         configFlags
		keyspace   string
		version    int64
		asJSON     bool
		ranges     bool
	)
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the ring of the current topology (or of --version): vnodes and token space per shard",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version < 0 {
				return usageError{fmt.Errorf("--version %d: versions start at 1 (omit it for the current one)", version)}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			store, closeFn, err := controlFlags{opts: opts, dsn: &controlDSN, cf: &cf}.open(ctx, keyspace)
			if err != nil {
				return err
			}
			defer closeFn()
			t, err := loadTopology(ctx, store, version)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return topoWriteJSON(out, t.Ring)
			}
			// The registry's weights: what the last planned ring published
			// set (topology.EndMigration) and every next plan reads.
			reg, err := store.Shards(ctx)
			if err != nil {
				return controlErr(err)
			}
			topoview.PrintRing(out, t, reg, ranges)
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.Flags().StringVar(&controlDSN, "control-dsn", "", controlDSNHelp)
	cf.register(cmd)
	cmd.Flags().StringVar(&keyspace, "keyspace", "", "the keyspace whose ring to show (default: "+topology.DefaultKeyspace+")")
	cmd.Flags().Int64Var(&version, "version", 0, "topology version (default: the current one)")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print the ring as JSON, {"vnodes":[{"token":..,"shard":..},...]}`)
	cmd.Flags().BoolVar(&ranges, "ranges", false, "list every range with its owner and state")
	return cmd
}

// redactDSN returns dsn with any password replaced, for messages and logs
// (pgsession.Redact).
func redactDSN(dsn string) string { return pgsession.Redact(dsn) }
