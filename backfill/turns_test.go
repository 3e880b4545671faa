package backfill

import (
	"context"
	"testing"
	"time"
)

// granted reports whether take returned within a short while.
func granted(t *testing.T, tu *turns, l *lane) (bool, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- tu.take(ctx, l) }()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("take: %v", err)
		}
		return true, cancel
	case <-time.After(50 * time.Millisecond):
		return false, cancel
	}
}

func TestTurnsGoToTheTableFurthestBehind(t *testing.T) {
	tu := &turns{free: 1}
	narrow, wide := &lane{est: 1000}, &lane{est: 100}
	tu.count(narrow, 300) // 30%
	tu.count(wide, 20)    // 20%
	ctx := context.Background()
	if err := tu.take(ctx, narrow); err != nil { // the only taker: granted
		t.Fatal(err)
	}
	// Both wait for the one turn; the wide table is further behind.
	order := make(chan *lane, 2)
	for _, l := range []*lane{narrow, wide} {
		go func() {
			if err := tu.take(ctx, l); err == nil {
				order <- l
			}
		}()
		time.Sleep(20 * time.Millisecond) // narrow waits first
	}
	tu.give()
	if first := <-order; first != wide {
		t.Fatalf("the turn went to the table at 30%% before the one at 20%%")
	}
	tu.count(wide, 15) // 35%: now the narrow table is behind
	tu.give()
	if second := <-order; second != narrow {
		t.Fatal("the second turn did not go to the narrow table")
	}
}

func TestTurnsWithoutEstimatesGoByRows(t *testing.T) {
	tu := &turns{free: 0}
	a, b, est := &lane{}, &lane{}, &lane{est: 10}
	tu.count(a, 50)
	tu.count(b, 10)
	tu.count(est, 100) // ten times its estimate: still before any lane without one
	order := make(chan *lane, 3)
	for _, l := range []*lane{a, b, est} {
		go func() {
			if err := tu.take(context.Background(), l); err == nil {
				order <- l
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	for _, want := range []*lane{est, b, a} {
		tu.give()
		if got := <-order; got != want {
			t.Fatalf("turn went to a lane with %d rows (est %d), want the one with %d (est %d)", got.rows, got.est, want.rows, want.est)
		}
	}
}

func TestTurnsCancelledWaiterLeavesTheTurn(t *testing.T) {
	tu := newTurns(1)
	l := &lane{est: 10}
	for i := 0; i < turnsPerUnit; i++ {
		if ok, _ := granted(t, tu, l); !ok {
			t.Fatalf("turn %d of %d not granted", i+1, turnsPerUnit)
		}
	}
	ok, cancel := granted(t, tu, l)
	if ok {
		t.Fatalf("a turn beyond the %d of one unit was granted", turnsPerUnit)
	}
	cancel() // the waiter gives up
	time.Sleep(20 * time.Millisecond)
	tu.give()
	if ok, _ := granted(t, tu, l); !ok {
		t.Fatal("the turn given back went to the waiter that had gone, not to the next taker")
	}
	tu.mu.Lock()
	defer tu.mu.Unlock()
	if tu.free != 0 || len(tu.waiting) != 0 {
		t.Fatalf("free %d, waiting %d; want 0 and 0", tu.free, len(tu.waiting))
	}
}

func TestTurnsWaitForTheTableBehind(t *testing.T) {
	tu := newTurns(1)
	ahead, behind := &lane{est: 100}, &lane{est: 100}
	tu.expect(ahead, behind)
	if ok, _ := granted(t, tu, ahead); ok {
		t.Fatal("a turn was given before every table had asked for one")
	}
	// behind asks, is granted (both at 0%) and keeps its turn: it reads.
	ctx := context.Background()
	if err := tu.take(ctx, behind); err != nil {
		t.Fatal(err)
	}
	tu.give() // ahead's first turn, granted once behind arrived, read 10 rows
	tu.count(ahead, 10)
	// Turns are free, but ahead is at 10% and behind, still reading, at 0%.
	if ok, _ := granted(t, tu, ahead); ok {
		t.Fatal("the table ahead got a turn while the one behind it was still reading")
	}
	tu.count(behind, 10) // behind's read ends: both at 10%, ahead's waiter is served
	tu.give()
	time.Sleep(20 * time.Millisecond)
	tu.mu.Lock()
	waiting := len(tu.waiting)
	tu.mu.Unlock()
	if waiting != 0 {
		t.Fatal("the table ahead still waits with the one behind caught up")
	}
	tu.count(ahead, 10) // 20% against 10%: waits again, until behind leaves
	if ok, _ := granted(t, tu, ahead); ok {
		t.Fatal("the table ahead got a turn while the one behind was copying")
	}
	tu.leave(behind)
	time.Sleep(20 * time.Millisecond)
	tu.mu.Lock()
	defer tu.mu.Unlock()
	if len(tu.waiting) != 0 {
		t.Fatal("the table ahead still waits after the one behind left")
	}
}
