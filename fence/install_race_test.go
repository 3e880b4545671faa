package fence

import (
	"context"
	"sync"
	"testing"

	"github.com/reshard/reshard/testkit/pgtest"
)

// Moves to one target install the fences of its tables at once (four
// moves of an add-node reconcile shard5's fences together). Their registry
// inserts race: INSERT ... ON CONFLICT (tbl) arbitrates only on the
// primary key, so an insert that passed its pre-check while its twin's row
// was not yet in the index met that row in fence_ident and failed with
// 23505 (make e2e, TestWorkerKilledMidCutover, 2026-12-04: a move stopped
// in JOINING). Every concurrent install must succeed.
func TestConcurrentInstallsOfOneTable(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	layouts, err := readLayout(ctx, db.Pool, set)
	if err != nil {
		t.Fatal(err)
	}
	const rounds, installers = 40, 4
	for round := range rounds {
		db.Exec(t, "DELETE FROM reshard.fence")
		var wg sync.WaitGroup
		errs := make(chan error, installers)
		start := make(chan struct{})
		for range installers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs <- installTable(ctx, db.Pool, set.Tables[0], layouts[0], false)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: a concurrent install failed: %v", round, err)
			}
		}
	}
}
