package cutover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reshard/reshard/internal/pgtest"
	"github.com/reshard/reshard/ring"
	"github.com/reshard/reshard/topology"
)

// A REPEATABLE READ transaction whose snapshot predates the fence can still
// write a fenced key (its snapshot does not see the fence row): the wait must
// hold until it ends, and report it when it outlives the budget.
func TestWaitInFlightCatchesRepeatableReadOpenedBeforeFence(t *testing.T) {
	ctx := context.Background()
	db := pgtest.NewDB(t, 0)
	set := usersSet(t, db)
	db.Exec(t, "INSERT INTO users VALUES (7, 'a')")
	if err := InstallTriggers(ctx, db.Pool, set, false); err != nil {
		t.Fatal(err)
	}
	rr := db.Conn(t)
	if _, err := rr.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM users"); err != nil {
		t.Fatal(err)
	}
	tok := tokenOf(t, db, 7)
	if err := Fence(ctx, db.Pool, set, []ring.Range{{Lo: tok - 1, Hi: tok}}, 1); err != nil {
		t.Fatal(err)
	}
	horizon, err := FenceHorizon(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	// The old snapshot passes the trigger: exactly the hazard.
	if _, err := rr.Exec(ctx, "UPDATE users SET v = 'after fence' WHERE id = 7"); err != nil {
		t.Fatalf("write of a REPEATABLE READ transaction opened before the fence: %v", err)
	}
	var obe *OverBudgetError
	err = WaitInFlight(ctx, db.Pool, horizon, nil, 300*time.Millisecond)
	if !errors.As(err, &obe) || len(obe.Blockers) != 1 || obe.Blockers[0].PID != int32(rr.PgConn().PID()) {
		t.Fatalf("WaitInFlight with the transaction open: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- WaitInFlight(ctx, db.Pool, horizon, nil, 10*time.Second) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("WaitInFlight returned while the transaction was open: %v", err)
	default:
	}
	if _, err := rr.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitInFlight after commit: %v", err)
	}
	// A transaction started after the fence sees it and is not waited for.
	late := db.Conn(t)
	if _, err := late.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM users"); err != nil {
		t.Fatal(err)
	}
	if err := WaitInFlight(ctx, db.Pool, horizon, nil, time.Second); err != nil {
		t.Fatalf("a transaction begun after the fence was waited for: %v", err)
	}
	if _, err := late.Exec(ctx, "UPDATE users SET v = 'late' WHERE id = 7"); !topology.IsFenceError(err) {
		t.Fatalf("write of a transaction begun after the fence: %v", err)
	}
}
