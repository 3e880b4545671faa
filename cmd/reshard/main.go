// Command reshard is the operator CLI of reshard.
//
// Layout: root.go builds the command tree and its exit codes; config.go
// reads reshard.yaml (the same way for every command); connect.go opens
// every pool the commands hand to domain packages;
// migrate.go starts migrations (add-node, split, remove-node, move);
// actions.go sends operator updates (pause, throttle, approve, rollback...);
// status.go and list.go show migrations; plan.go and ring.go are dry runs;
// init.go, keyspace.go, topology.go, check.go and placement.go manage the
// control database (topoview prints what they read); worker.go runs a
// worker (package worker); dev.go and demo.go are the local cluster and the demo;
// verify.go is the standalone verify; examples.go and completion.go serve
// --help and the shell.
package main

import (
	"fmt"
	"os"

	"github.com/reshard/reshard/internal/pgerr"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprint(os.Stderr, errorText(err))
		os.Exit(exitCode(err))
	}
}

// errorText is how the CLI reports err, with the fix of an error whose fix
// is known.
func errorText(err error) string {
	s := "reshard: " + err.Error() + "\n"
	if pgerr.RowSecurity(err) {
		s += "  fix: " + pgerr.RowSecurityFix + "\n"
	}
	return s
}
