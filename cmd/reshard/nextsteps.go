package main

import (
	"strings"

	"github.com/reshard/reshard/planview"
	"github.com/reshard/reshard/statusview"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// nextSteps are the commands an operator would run next on a migration
// (statusview.NextSteps).
var nextSteps = statusview.NextSteps

// startCommand is the command that starts the migration a plan describes:
// the same verb, arguments and flags without plan and --json.
func startCommand(cmd *cobra.Command, args []string) string {
	parts := []string{"reshard", cmd.Name()}
	parts = append(parts, args...)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if f.Name == "json" || f.Name == "dry-run" {
			return
		}
		if f.Value.Type() == "bool" {
			if f.Value.String() == "true" {
				parts = append(parts, "--"+f.Name)
			} else {
				parts = append(parts, "--"+f.Name+"=false")
			}
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				parts = append(parts, "--"+f.Name, planview.ShellQuote(v))
			}
			return
		}
		parts = append(parts, "--"+f.Name, planview.ShellQuote(f.Value.String()))
	})
	return strings.Join(parts, " ")
}
