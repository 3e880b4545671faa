package main

import (
	"os"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// The servers (PostgreSQL, the Temporal dev server) the tests start are
// stopped when the package's tests end, whichever ran.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
