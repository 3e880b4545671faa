package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/reshard/reshard/control"
	"github.com/spf13/cobra"
)

func newListCmd(opts *globalOptions) *cobra.Command {
	var (
		cf     configFlags
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--limit 20] [--json]",
		Short: "Migrations, running and recent, newest first, with status and phase",
		Long: `Lists Migration workflows from Temporal's visibility store: id, workflow
status, phase (the ReshardPhase search attribute the workflows keep current),
start and close time, and what each one does. Needs no worker.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usageError{fmt.Errorf("--limit %d: want 1 or more", limit)}
			}
			cfg, err := cf.load(opts)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			tc, err := cfg.dialTemporal(ctx, opts)
			if err != nil {
				return err
			}
			defer tc.Close()
			rows, err := control.List(ctx, tc, control.AllMigrations, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return topoWriteJSON(out, topoNonNil(rows))
			}
			if len(rows) == 0 {
				fmt.Fprintln(out, "no migrations yet; plan one with reshard plan add-node <shard> --table t:key")
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATUS\tPHASE\tSTARTED\tCLOSED\tWHAT")
			for _, r := range rows {
				closed := "-"
				if !r.Closed.IsZero() {
					closed = r.Closed.Local().Format(time.DateTime)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Status, topoDash(r.Phase), r.Started.Local().Format(time.DateTime), closed, topoDash(r.Summary))
			}
			return w.Flush()
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(cmd)
	cmd.Flags().IntVar(&limit, "limit", 20, "migrations to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
