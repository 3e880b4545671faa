// Command reshard is the operator CLI of reshard.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "reshard:", err)
		os.Exit(exitCode(err))
	}
}
